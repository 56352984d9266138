"""A command line split into the commands it runs, with a real shell parser (bashlex).

Each simple command is read in every form its words can take (command_words.py), each form with
its wrappers set aside (command_wrappers.py); text a shell is given as commands (`sh -c '…'`,
`bash <<< '…'`, `eval …`) is read the same way, a few levels deep. What a parser cannot see through
(`$(…)`, backticks, `<(…)`, `source`, a command name that is a variable) marks the line as opaque:
the policy then asks the owner at least.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import bashlex  # type: ignore[import-untyped]
import bashlex.errors  # type: ignore[import-untyped]

from .command_words import UNKNOWN, Form, Known, TooManyForms, combine, has_unknown, word_forms
from .command_wrappers import SHELLS, Unwrapped, program, unwrap

FORMS_PER_COMMAND = 256
FORMS_PER_LINE = 2048  # simple commands read in all their forms, text given to shells included
MAX_TEXT_DEPTH = 3  # `sh -c "bash -c '…'"`: levels of commands given as text that are read
# Commands that run code the checker cannot read (a file, a string evaluated later, another root).
INDIRECT = frozenset({
    "source", ".", "su", "chroot", "unshare", "nsenter", "watch", "script", "trap", "alias",
    "parallel", "flock", "chrt", "taskset", "runuser", "setpriv", "systemd-run",
})
_FIND_RUNS = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
_OPAQUE_KINDS = {"commandsubstitution": "$(…)", "processsubstitution": "<(…)"}
_TOKEN = re.compile(r"[^\s;&|()<>`$\"']+")
_SUBSTITUTION = re.compile(r"\$\(|`|[<>]\(")
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)
# Variables that decide which program or code runs: set before a command (or exported), a rule's prefix
# would no longer say what runs.
_STEERING = re.compile(r"(PATH|LD_[A-Z_]+|BASH_ENV|ENV|IFS|SHELLOPTS|BASHOPTS|PYTHONPATH|PYTHONSTARTUP|PYTHONHOME|"
                       r"PERL5LIB|PERL5OPT|RUBYOPT|RUBYLIB|NODE_OPTIONS|NODE_PATH|GIT_[A-Z_]+)=")


class CommandLineInvalid(ValueError):
    """The line cannot be parsed as a shell command line."""


@dataclass
class Analysis:
    parts: list[list[str]] = field(default_factory=list)  # every command the line runs, wrappers set aside
    written: list[list[str]] = field(default_factory=list)  # every simple command as written, in each form
    opaque: list[str] = field(default_factory=list)  # why some of it cannot be checked

    @property
    def analysable(self) -> bool:
        return not self.opaque

    def add(self, other: Analysis) -> None:
        self.parts += other.parts
        self.written += other.written
        self.opaque += other.opaque


@dataclass
class _Budget:
    """How many more command forms one line may make the checker read (shared with the text it runs)."""

    left: int = FORMS_PER_LINE
    texts: set[str] = field(default_factory=set)  # command lines given as text, read once each


def analyse(line: str, *, depth: int = 0, given: Known | None = None, budget: _Budget | None = None) -> Analysis:
    """Every command of `line` (in pipelines, lists, subshells, loops, substitutions, text run by a shell)."""
    if not line.strip():
        raise CommandLineInvalid("the command is empty")
    if "\x00" in line:
        raise CommandLineInvalid("the command contains a NUL byte")
    try:
        trees = bashlex.parse(line)
    except NotImplementedError as exc:  # valid shell bashlex does not model (e.g. `case`)
        return Analysis(parts=[], opaque=[f"a construct the checker cannot read ({exc})"])
    except (bashlex.errors.ParsingError, AttributeError, IndexError, TypeError, AssertionError) as exc:
        message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        raise CommandLineInvalid(str(message)) from None
    known: dict[str, list[Form]] = {name: list(forms) for name, forms in (given or {}).items()}
    for tree in trees:
        _collect_values(tree, known)
    found = Analysis()
    walker = _Walker(found, known, depth, budget or _Budget())
    for tree in trees:
        walker.walk(tree)
    if not found.opaque and _SUBSTITUTION.search(line):  # e.g. inside ${x:-…} or a here-document
        found.opaque.append("a command substitution")
    if not found.parts and not found.written and not found.opaque:
        raise CommandLineInvalid("no command found")
    return found


def words_anywhere(line: str) -> list[str]:
    """Every word-like token of the line, ignoring shell structure (a fallback scan for forbidden prefixes)."""
    return _TOKEN.findall(line)


@dataclass
class _Walker:
    found: Analysis
    known: Known
    depth: int
    budget: _Budget

    def walk(self, node: Any) -> None:
        kind = getattr(node, "kind", "")
        if kind in _OPAQUE_KINDS:
            self.found.opaque.append(_OPAQUE_KINDS[kind])
        elif kind == "function":
            self.found.opaque.append("a function definition")
        if kind == "command":
            self._command(node)
        for child in _children(node):
            self.walk(child)

    def _command(self, node: Any) -> None:
        words: list[Any] = []
        for part in node.parts:
            text = getattr(part, "word", "")
            if part.kind in ("assignment", "word") and _STEERING.match(text):
                self.found.opaque.append(f"'{text.split('=', 1)[0]}=' changes which program a command runs")
            if part.kind == "word":  # leading NAME=value words are assignments, not words
                words.append(part)
        if not words:
            return
        if _expands(words[0]):
            self.found.opaque.append(f"a command name that is computed ({words[0].word})")
        try:
            readings = combine([word_forms(w, self.known) for w in words], FORMS_PER_COMMAND)
        except TooManyForms:
            readings = []
        self.budget.left -= len(readings)
        if not readings or self.budget.left < 0:
            self.found.opaque.append("words that expand to more forms than the checker reads")
            readings = [tuple(w.word for w in words)]
        stdin = _stdin_texts(node, self.known)
        for reading in readings:
            self._reading(list(reading), stdin)

    def _reading(self, words: list[str], stdin: list[str]) -> None:
        if not words:
            return
        self.found.written.append(words)
        run = unwrap(words)
        self.found.opaque += run.asks
        if run.command:
            self.found.parts.append(run.command)
            name = program(run.command[0])
            if name == "eval":
                run.text.append(" ".join(run.command[1:]))
            elif name == "find":
                for command in _found_commands(run.command):
                    self._reading(command, [])
            elif name in INDIRECT:
                self.found.opaque.append(f"'{name}' runs code the checker cannot read")
        for text in run.text:
            self._text(text, _positional(run), what=f"'{program(words[0])}' runs a command given as text")
        if run.reads_input:
            for text in stdin or [UNKNOWN]:
                self._text(text, {}, what="a shell reads its commands from its input")

    def _text(self, text: str, given: Known, *, what: str) -> None:
        """A command line given as text: read like the line itself, and asked about at least."""
        self.found.opaque.append(what)
        if has_unknown(text) or self.depth + 1 >= MAX_TEXT_DEPTH:
            self.found.opaque.append("a command given as text the checker cannot read whole")
            return
        key = repr((text, sorted(given.items())))
        if key in self.budget.texts:
            return
        self.budget.texts.add(key)
        try:
            self.found.add(analyse(text, depth=self.depth + 1, given={**self.known, **given}, budget=self.budget))
        except CommandLineInvalid:
            self.found.opaque.append("a command given as text that does not parse")


def _children(node: Any) -> list[Any]:
    out: list[Any] = []
    for name in ("parts", "list"):
        value = getattr(node, name, None)
        if isinstance(value, list):
            out.extend(value)
    for name in ("command", "output", "heredoc"):
        value = getattr(node, name, None)
        if value is not None and hasattr(value, "kind"):
            out.append(value)
    return out


def _collect_values(node: Any, known: dict[str, list[Form]]) -> None:
    """Values the line gives variables (`X=push`, `export X=push`, `for X in a b`): possible forms of `$X`."""
    kind = getattr(node, "kind", "")
    if kind in ("assignment", "word"):
        match = _ASSIGNMENT.fullmatch(getattr(node, "word", ""))
        if match:
            value = UNKNOWN if getattr(node, "parts", None) else match.group(2)
            known.setdefault(match.group(1), []).append((value,))
    if kind == "for":
        _collect_loop(node, known)
    for child in _children(node):
        _collect_values(child, known)


def _collect_loop(node: Any, known: dict[str, list[Form]]) -> None:
    parts = [p for p in node.parts if getattr(p, "kind", "") in ("word", "reservedword")]
    if len(parts) < 3 or parts[1].kind != "word" or getattr(parts[2], "word", "") != "in":
        return
    for part in parts[3:]:
        if part.kind != "word":
            break
        try:
            forms = word_forms(part, known)
        except TooManyForms:
            forms = [(UNKNOWN,)]
        known.setdefault(parts[1].word, []).extend((w,) for form in forms for w in form)


def _stdin_texts(node: Any, known: Known) -> list[str]:
    """What a here-string or here-document gives the command as input (a shell reads it as commands)."""
    texts: list[str] = []
    for part in node.parts:
        if getattr(part, "kind", "") != "redirect":
            continue
        if part.type == "<<<" and hasattr(part.output, "word"):
            try:
                texts += [" ".join(form) for form in word_forms(part.output, known)]
            except TooManyForms:
                texts.append(UNKNOWN)
        elif part.type in ("<<", "<<-") and getattr(part, "heredoc", None) is not None:
            texts.append(part.heredoc.value.rsplit("\n", 1)[0])
    return texts


def _found_commands(words: list[str]) -> list[list[str]]:
    """The commands `find … -exec CMD {} ;` runs for each file it finds."""
    commands: list[list[str]] = []
    for i, word in enumerate(words):
        if word in _FIND_RUNS:
            rest = words[i + 1:]
            end = next((j for j, w in enumerate(rest) if w in (";", "+")), len(rest))
            commands.append(rest[:end])
    return commands


def _positional(run: Unwrapped) -> dict[str, list[Form]]:
    """`sh -c TEXT NAME A B`: inside TEXT, $0 is NAME, $1 is A, and $@ is A B."""
    given: dict[str, list[Form]] = {str(i): [(value,)] for i, value in enumerate(run.positional)}
    if run.positional[1:]:
        given["@"] = given["*"] = [tuple(run.positional[1:])]
    return given


def _expands(word: Any) -> bool:
    return any(getattr(p, "kind", "") in ("parameter", "commandsubstitution", "processsubstitution")
               for p in getattr(word, "parts", []) or [])
