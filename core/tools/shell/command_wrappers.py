"""The command a wrapper runs: `env -i X=1 git push`, `timeout 5 git push` and `git -C . push` are `git push`.

Rules name the command that does the work, so a wrapper's own words and git's global options
(given before the subcommand) are set aside before the rules are matched. A shell given its
commands as text (`sh -c '…'`, `env -S '…'`) hands that text back to be read as a command line.
What a wrapper does that a rule cannot see (`xargs` adds words, `git -c` changes what git runs)
is a reason to ask.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from .command_words import has_unknown

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "fish", "ash", "mksh"})


@dataclass(frozen=True)
class _Wrapper:
    with_value: frozenset[str] = frozenset()  # options whose value is the next word
    positional: int = 0  # words after the options that are not the command (timeout's duration)
    asks: str | None = None  # why a command run this way is asked about, whatever the rules say
    assignments: bool = False  # NAME=value words before the command (env)
    text_options: frozenset[str] = frozenset()  # options whose value is a command line (env -S)


def _options(*names: str) -> frozenset[str]:
    return frozenset(names)


_WRAPPERS: dict[str, _Wrapper] = {
    "command": _Wrapper(),
    "builtin": _Wrapper(),
    "exec": _Wrapper(_options("-a")),
    "env": _Wrapper(_options("-u", "--unset", "-C", "--chdir", "-S", "--split-string"), assignments=True,
                    text_options=frozenset({"-S", "--split-string"})),
    "nice": _Wrapper(_options("-n", "--adjustment")),
    "nohup": _Wrapper(),
    "time": _Wrapper(_options("-f", "--format", "-o", "--output")),
    "timeout": _Wrapper(_options("-s", "--signal", "-k", "--kill-after"), positional=1),
    "stdbuf": _Wrapper(_options("-i", "-o", "-e", "--input", "--output", "--error")),
    "setsid": _Wrapper(),
    "ionice": _Wrapper(_options("-c", "-n", "-p", "-P", "-u", "--class", "--classdata", "--pid", "--pgid", "--uid")),
    "xargs": _Wrapper(_options("-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter",
                               "--max-args", "--max-procs", "--max-lines", "--max-chars", "--process-slot-var"),
                      asks="'xargs' adds words from its input to the command"),
    "sudo": _Wrapper(_options("-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user", "--group"),
                     asks="'sudo' runs a command as another user"),
    "doas": _Wrapper(_options("-u", "-C"), asks="'doas' runs a command as another user"),
    "busybox": _Wrapper(),
}
# Global options git takes before its subcommand. `--exec-path`, `--config-env` and most `-c` settings
# change which program git runs (an alias renames a subcommand; a pager, an editor, an ssh command or a
# filter is a program): they ask. A few `-c` settings only change what git writes or shows.
_GIT_VALUE = _options("-C", "-c", "--git-dir", "--work-tree", "--namespace", "--exec-path", "--super-prefix",
                      "--config-env", "--attr-source", "--list-cmds")
_GIT_FLAG = _options("-p", "-P", "--paginate", "--no-pager", "--no-optional-locks", "--literal-pathspecs",
                     "--glob-pathspecs", "--noglob-pathspecs", "--icase-pathspecs", "--no-replace-objects",
                     "--no-lazy-fetch", "--no-advice", "--bare")
_GIT_ASKS = _options("--exec-path", "--config-env")
_GIT_PLAIN_SETTINGS = ("user.", "color.", "advice.", "core.quotepath=", "init.defaultbranch=", "commit.gpgsign=",
                       "tag.gpgsign=", "safe.directory=")
_SHELL_VALUE = _options("-o", "+o", "-O", "+O", "--rcfile", "--init-file")


@dataclass
class Unwrapped:
    """The command that does the work, and what else the line runs or needs asking about."""

    command: list[str]
    asks: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)  # command lines given as text (sh -c '…', env -S '…')
    positional: list[str] = field(default_factory=list)  # $0, $1, … of `sh -c TEXT NAME ARGS`
    reads_input: bool = False  # a shell that reads its commands from stdin


def program(word: str) -> str:
    """The name a command is known by: /usr/bin/git is git."""
    return word.rstrip("/").rsplit("/", 1)[-1] if "/" in word else word


def is_wrapper(word: str) -> bool:
    return program(word) in _WRAPPERS or program(word) in SHELLS


def unwrap(words: Sequence[str]) -> Unwrapped:
    """Set aside wrappers and git's global options, repeatedly (`nice env git -C . push`)."""
    found = Unwrapped(command=list(words))
    for _ in range(8):
        if not found.command or has_unknown(found.command[0]):
            return found
        name = program(found.command[0])
        if name == "command" and found.command[1:2] and found.command[1] in ("-v", "-V"):
            return found  # `command -v git` looks git up
        if name == "git":
            _strip_git_options(found)
        elif name in SHELLS:
            _shell(found)
        if name not in _WRAPPERS or not _strip_wrapper(found, _WRAPPERS[name]):
            return found
    found.asks.append("wrappers nested too deep to check")
    return found


def _strip_wrapper(found: Unwrapped, wrapper: _Wrapper) -> bool:
    """Whether a command follows the wrapper's words (`env` alone prints the environment; `env -S TEXT`
    leaves only TEXT to read)."""
    rest = found.command[1:]
    i, text = 0, None
    while i < len(rest):
        word = rest[i]
        if word == "--":
            i += 1
            break
        if wrapper.assignments and (word == "-" or ("=" in word and not word.startswith("-"))):
            i += 1  # `env NAME=value …`, and `env -` (`env -i`)
            continue
        if not word.startswith("-") or word == "-":
            break
        takes_value = word in wrapper.with_value
        text_option = next((t for t in wrapper.text_options if word.startswith(t)), None)
        if text_option is not None:
            text = rest[i + 1] if takes_value and i + 1 < len(rest) else word[len(text_option):].lstrip("=")
        i += 2 if takes_value else 1
    if text is not None:  # `env -S 'git pu' sh`: the text's words come first, then the rest
        found.text.append(" ".join([text, *map(shlex.quote, rest[i:])]))
        found.command = []
        return False
    i += wrapper.positional
    if i >= len(rest):
        return False
    if wrapper.asks:
        found.asks.append(wrapper.asks)
    found.command = rest[i:]
    return True


def _strip_git_options(found: Unwrapped) -> None:
    words = found.command
    i = 1
    while i < len(words) and words[i].startswith("-"):
        option, joined, value = words[i].partition("=")
        step = 1
        if option in _GIT_VALUE and not joined:
            value, step = (words[i + 1] if i + 1 < len(words) else ""), 2
        elif option not in _GIT_FLAG and option not in _GIT_VALUE and not option.startswith("-C"):
            if i + 1 < len(words) and not words[i + 1].startswith("-"):  # not --version or --help
                found.asks.append(f"git option '{words[i]}' before its subcommand")
            return
        if option in _GIT_ASKS or (option == "-c" and not _plain_setting(value)):
            found.asks.append(f"git's '{option}' option may change which program git runs")
        i += step
    found.command = [words[0], *words[i:]]


def _plain_setting(setting: str) -> bool:
    return setting.lower().startswith(_GIT_PLAIN_SETTINGS)


def _shell(found: Unwrapped) -> None:
    """`sh -c TEXT [NAME ARGS…]` runs TEXT; `sh` with no script reads its commands from stdin."""
    words = found.command
    i, runs_text = 1, False
    while i < len(words) and words[i][:1] in ("-", "+") and words[i] not in ("-", "--"):
        word = words[i]
        if word in _SHELL_VALUE:
            i += 2
            continue
        if not word.startswith("--") and "c" in word[1:]:
            runs_text = True
        i += 1
    if i < len(words) and words[i] == "--":
        i += 1
    if runs_text:
        if i >= len(words):
            found.asks.append("a shell with '-c' and no command")
            return
        found.text.append(words[i])
        found.positional = words[i + 1:]
    elif i >= len(words) or words[i] == "-" or "-s" in words[1:i]:
        found.reads_input = True
