"""A command line split into the simple commands it runs, with a real shell parser (bashlex).

Each part is the list of words a simple command starts with. What a parser cannot see through
(`$(…)`, backticks, `<(…)`, `eval`, `bash -c`, a command name that is a variable) marks the line
as opaque: the policy then asks the owner at least.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import bashlex  # type: ignore[import-untyped]
import bashlex.errors  # type: ignore[import-untyped]

# Commands that run other code given as text, or another command after their own words.
INDIRECT = frozenset({
    "eval", "exec", "source", ".", "xargs", "sudo", "su", "doas", "env", "command", "builtin", "nohup",
    "time", "timeout", "nice", "ionice", "setsid", "stdbuf", "chroot", "unshare", "nsenter", "watch",
    "script", "trap", "alias", "busybox",
})
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "ash"})
_OPAQUE_KINDS = {"commandsubstitution": "$(…)", "processsubstitution": "<(…)"}
_TOKEN = re.compile(r"[^\s;&|()<>`$\"']+")
_SUBSTITUTION = re.compile(r"\$\(|`|[<>]\(")
# Variables that decide which program or code runs: set before a command (or exported), a rule's prefix
# would no longer say what runs.
_STEERING = re.compile(r"(PATH|LD_[A-Z_]+|BASH_ENV|ENV|IFS|SHELLOPTS|BASHOPTS|PYTHONPATH|PYTHONSTARTUP|PYTHONHOME|"
                       r"PERL5LIB|PERL5OPT|RUBYOPT|RUBYLIB|NODE_OPTIONS|NODE_PATH|GIT_[A-Z_]+)=")


class CommandLineInvalid(ValueError):
    """The line cannot be parsed as a shell command line."""


@dataclass
class Analysis:
    parts: list[list[str]] = field(default_factory=list)  # the words of every simple command found
    opaque: list[str] = field(default_factory=list)  # why some of it cannot be checked

    @property
    def analysable(self) -> bool:
        return not self.opaque


def analyse(line: str) -> Analysis:
    """Every simple command of `line` (in pipelines, lists, subshells, loops, substitutions)."""
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
    found = Analysis()
    for tree in trees:
        _walk(tree, found)
    if not found.opaque and _SUBSTITUTION.search(line):  # e.g. inside ${x:-…} or a here-document
        found.opaque.append("a command substitution")
    if not found.parts and not found.opaque:
        raise CommandLineInvalid("no command found")
    return found


def words_anywhere(line: str) -> list[str]:
    """Every word-like token of the line, ignoring shell structure (a fallback scan for forbidden prefixes)."""
    return _TOKEN.findall(line)


def _walk(node: Any, found: Analysis) -> None:
    kind = getattr(node, "kind", "")
    if kind in _OPAQUE_KINDS:
        found.opaque.append(_OPAQUE_KINDS[kind])
    elif kind == "function":
        found.opaque.append("a function definition")
    if kind == "command":
        _command(node, found)
    for child in _children(node):
        _walk(child, found)


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


def _command(node: Any, found: Analysis) -> None:
    words: list[str] = []
    for part in node.parts:
        text = getattr(part, "word", "")
        if part.kind in ("assignment", "word") and _STEERING.match(text):
            found.opaque.append(f"'{text.split('=', 1)[0]}=' changes which program a command runs")
        if part.kind == "assignment" and not words:
            continue  # FOO=1 cmd …: the command is cmd
        if part.kind != "word":
            continue
        if not words and _expands(part):
            found.opaque.append(f"a command name that is computed ({part.word})")
        words.append(part.word)
    if not words:
        return
    name = words[0].rsplit("/", 1)[-1]
    if name in INDIRECT and _runs_something(name, words[1:]):
        found.opaque.append(f"'{name}' runs another command")
    elif name in SHELLS and any(w == "-c" or (w.startswith("-") and "c" in w[1:] and not w.startswith("--")) for w in words[1:]):
        found.opaque.append(f"'{name} -c' runs a command given as text")
    found.parts.append(words)


def _runs_something(name: str, rest: list[str]) -> bool:
    """`env` alone prints the environment and `command -v x` looks x up; with a command after them they run it."""
    if name == "command" and rest[:1] in (["-v"], ["-V"]):
        return False
    if name == "env":
        return any(not w.startswith("-") and "=" not in w for w in rest)
    return True


def _expands(word: Any) -> bool:
    return any(getattr(p, "kind", "") in ("parameter", "commandsubstitution", "processsubstitution")
               for p in getattr(word, "parts", []) or [])
