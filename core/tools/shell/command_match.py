"""Whether a command's words start with a rule's prefix, comparing what the words name.

Paths are compared normalised, as the sandbox resolves them: `@pkg/../@project/x.py` and
`/@project/x.py` are `@project/x.py`, so they are not under `@pkg/`; `./a/../b` is `b`. A program
named by its path counts as its name (`/usr/bin/git` is `git`), except that a program the command
could have written itself (under the project, `/tmp`, or a relative path) never gets an `allow` rule
of that name, and a path through `..` never gets an `allow` from a folder rule (`uv run @pkg/`),
since a folder on the way may be a link. A word holding text the checker cannot know (see
command_words.py) or a glob (`pu*`, which a file the command made may match) may match: such a
match is MAYBE, and the words after it may be anything.
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
import shlex
from collections.abc import Sequence
from enum import Enum

from .command_words import UNKNOWN

_ALIAS = re.compile(r"/?@(project|pkg)(?=/|$)")
_GLOB = "*?["
_WRITABLE = ("@project", "/tmp", "/var/tmp", "/dev/shm")


class Match(Enum):
    NO = 0
    MAYBE = 1
    YES = 2


@functools.lru_cache(maxsize=1024)
def prefix_words(prefix: str) -> tuple[str, ...]:
    """A rule's words as they are compared (its paths normalised)."""
    try:
        words = shlex.split(prefix)
    except ValueError:
        words = prefix.split()
    return tuple(_rule_word(w) for w in words)


def matches(words: Sequence[str], wanted: Sequence[str], *, allows: bool = False) -> Match:
    """Whole words; a last wanted word ending in '/' matches any path below it (`uv run @pkg/`)."""
    if not wanted or not words:
        return Match.NO
    first = normalised(words[0])
    if "/" not in wanted[0] and "/" in first and not (allows and _writable(first)):
        first = first.rstrip("/").rsplit("/", 1)[-1]
    shown = [first, *(normalised(w) for w in words[1:])]
    for index, want in enumerate(wanted):
        if index >= len(shown):
            return Match.NO
        word, below = shown[index], index == len(wanted) - 1 and want.endswith("/")
        surely_below = below and word.startswith(want) and not (allows and _climbs(words[index]))
        if UNKNOWN not in word and (word == want or surely_below):
            continue
        if _uncertain(word):  # may be this word, and may become several words: the rest is unknown too
            return Match.MAYBE if _could_be(word, want, below) else Match.NO
        return Match.NO
    return Match.YES


def normalised(word: str) -> str:
    """What a path word names, as the rules spell it: aliases without their sandbox slash, no `.`, `..` or `//`."""
    if "/" not in word or word.startswith("-") or UNKNOWN in word:
        return word
    if word.startswith("/") or _ALIAS.match(word):
        path = posixpath.normpath("/" + word.lstrip("/"))  # `//x` is `/x` too
        return path[1:] if _ALIAS.match(path) else path
    path = posixpath.normpath(word)
    if path == ".":
        return path
    return path if "/" in path and not path.startswith("@") else "./" + path  # `./@pkg/x`, `./pytest`: project files


def _rule_word(word: str) -> str:
    below = word.endswith("/")
    shown = normalised(word)
    return shown + "/" if below and not shown.endswith("/") else shown


def _climbs(word: str) -> bool:
    """A path through `..` never earns an allow from a folder rule: a folder on the way may be a link elsewhere."""
    return ".." in word.split("/")


def _writable(path: str) -> bool:
    if not path.startswith("/") and not path.startswith("@pkg"):
        return True  # relative: the project's own files
    return any(path == root or path.startswith(root + "/") for root in _WRITABLE)


def _uncertain(word: str) -> bool:
    return UNKNOWN in word or any(c in word for c in _GLOB)


def _could_be(word: str, want: str, below: bool) -> bool:
    """Whether the word could become `want` (or a path below it): unknown text may be anything, spaces
    included; `*`, `?` and `[…]` may match a file of that name, which the command can create."""
    known_start = re.split(r"[\x00*?\[]", word, maxsplit=1)[0]
    if want.startswith(known_start) and UNKNOWN in word:
        return True
    if below and (want.startswith(known_start) or known_start.startswith(want)):
        return True
    return UNKNOWN not in word and fnmatch.fnmatchcase(want, word)
