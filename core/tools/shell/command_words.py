"""What one word of a command line can become once the shell expands it.

A word's form is the words the shell makes of it. Braces make several words, as bash expands them
(`git pus{h,}` runs `git push pus`, `{git,push}` runs `git push`); a parameter may take several
values, so a word may have several forms (`git ${X:-push}` is `git push`, or git followed by
whatever `$X` holds). Text the checker cannot know (a variable's value, a command's output) is the
character UNKNOWN inside a form. Quotes and backslashes are already undone by bashlex; braces are
expanded whether or not they were quoted (the stricter reading), never inside `${…}`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import bashlex  # type: ignore[import-untyped]
import bashlex.errors  # type: ignore[import-untyped]
from braceexpand import UnbalancedBracesError, braceexpand  # type: ignore[import-untyped]

UNKNOWN = "\x00"  # text the checker cannot know; a checked line never holds a NUL byte
FORMS_PER_WORD = 64
WORDS_PER_BRACE = 1024  # `{1..1000}` is a thousand words; more than this many and the line is asked about
Form = tuple[str, ...]  # the words one shell word becomes (none, one, or several after word splitting)
Known = Mapping[str, Sequence[Form]]  # values the line itself gives a variable (`X=push`, `for X in …`)

_PLACEHOLDER = 0xE000  # private-use characters stand for `${…}` while braces are expanded
_PARAMETER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:(:?[-=+?])(.*))?", re.DOTALL)
_MAX_DEPTH = 3


class TooManyForms(ValueError):
    """A word (or a command) can take more forms than the checker reads one by one."""


class _Unreadable(ValueError):
    """bashlex did not model this expansion (e.g. `${X:-${Y}}`): the whole word is unknown."""


def word_forms(node: Any, known: Known, depth: int = 0) -> list[Form]:
    """Every form of a bashlex word node; raises TooManyForms past FORMS_PER_WORD."""
    text: str = node.word
    parts = list(getattr(node, "parts", None) or [])
    if any(getattr(p, "kind", "") in ("commandsubstitution", "processsubstitution") for p in parts):
        return [(UNKNOWN,)]  # `$(…)`: the line is asked about anyway; its output could be anything
    try:
        text, values = _parameters(text, parts, known, depth)
    except _Unreadable:
        return [(UNKNOWN,)]
    braced = brace_words(text)
    if len(braced) > WORDS_PER_BRACE:
        raise TooManyForms(node.word)
    forms: list[Form] = []
    for choice in itertools.product(*values):
        forms.append(tuple(w for one in braced for w in _fill(one, choice)))
        if len(forms) > FORMS_PER_WORD:
            raise TooManyForms(node.word)
    return list(dict.fromkeys(forms))


def _parameters(text: str, parts: Sequence[Any], known: Known, depth: int) -> tuple[str, list[list[Form]]]:
    """The word with each `$X` / `${…}` replaced by a placeholder, and the forms each one can take."""
    values: list[list[Form]] = []
    for part in parts:
        if getattr(part, "kind", "") != "parameter":
            continue
        value = getattr(part, "value", None)
        spelled = _find(text, value)
        if spelled is None or "${" in value:  # $'…', $"…" and nested ${…}, which bashlex does not model
            raise _Unreadable(text)
        text = text.replace(spelled, chr(_PLACEHOLDER + len(values)), 1)
        values.append(_parameter_forms(value, known, depth))
    return text, values


def _default_forms(text: str, known: Known, depth: int) -> list[Form]:
    """The words a default like `${X:-a b}` gives, read as unquoted shell words."""
    if not text.strip():
        return [()]
    if depth >= _MAX_DEPTH:
        raise _Unreadable(text)
    try:
        [tree] = bashlex.parse("true " + text)
    except (bashlex.errors.ParsingError, NotImplementedError, ValueError, AttributeError, IndexError, TypeError):
        raise _Unreadable(text) from None
    words = [p for p in getattr(tree, "parts", [])[1:] if getattr(p, "kind", "") == "word"]
    if getattr(tree, "kind", "") != "command" or len(words) != len(tree.parts) - 1:
        raise _Unreadable(text)
    return combine([word_forms(w, known, depth + 1) for w in words], FORMS_PER_WORD)


def combine(per_word: Sequence[Sequence[Form]], cap: int) -> list[Form]:
    """Every way to pick one form of each word, joined; raises TooManyForms past `cap`."""
    total = 1
    for forms in per_word:
        total *= max(len(forms), 1)
        if total > cap:
            raise TooManyForms(f"{total} forms")
    return [tuple(w for form in choice for w in form) for choice in itertools.product(*per_word)]


def has_unknown(word: str) -> bool:
    return UNKNOWN in word


def _find(text: str, value: str | None) -> str | None:
    if not value:
        return None
    for spelled in ("${" + value + "}", "$" + value):
        if spelled in text:
            return spelled
    return None


def _parameter_forms(value: str, known: Known, depth: int) -> list[Form]:
    """`${X:-push}` may be push or X's value; `${X:+push}` push or nothing; `$X` X's value or nothing
    (a variable nobody set is empty, and `git $X push` runs `git push`)."""
    match = _PARAMETER.fullmatch(value)
    if match is None:  # ${#X}, ${X#pat}, ${X/a/b}, ${!X}: computed from a value the checker does not know
        return [(UNKNOWN,)]
    name, operator, argument = match.group(1), match.group(2), match.group(3) or ""
    held = [*known.get(name, ()), (UNKNOWN,)]
    if operator is None or operator == "?":
        return _unique([*held, ()])
    if operator == ":?":
        return _unique(held)
    alternative = _default_forms(argument, known, depth + 1)
    if operator.endswith("+"):
        return _unique([(), *alternative])
    return _unique([*held, *alternative] if operator.startswith(":") else [*held, (), *alternative])


def brace_words(text: str) -> list[str]:
    """`pus{h,}` is the two words push and pus; `{` alone stays as it is."""
    if "{" not in text:
        return [text]
    try:
        return list(itertools.islice(braceexpand(text, escape=False), WORDS_PER_BRACE + 1))
    except UnbalancedBracesError:  # `{` alone: the shell keeps it as it is
        return [text]


def _fill(text: str, choice: Sequence[Form]) -> Form:
    """The words of `text` with each placeholder replaced by the chosen form (its words split apart)."""
    words: list[str] = [""]
    for char in text:
        index = ord(char) - _PLACEHOLDER
        if not 0 <= index < len(choice):
            words[-1] += char
            continue
        form = choice[index]
        if not form:
            continue
        words[-1] += form[0]
        words.extend(form[1:])
    return tuple(w for w in words if w)


def _unique(forms: Iterable[Form]) -> list[Form]:
    return list(dict.fromkeys(forms))
