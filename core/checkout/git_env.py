"""What every git command the bot runs is allowed to read from its surroundings: almost nothing.

A run's worktree is written by the agent's commands, so git must take nothing from it but the
files to commit. Its environment is rebuilt from scratch (PATH, an empty HOME, the locale, the
identity of the commit and the few variables a push to the configured remote needs: the SSH
agent, proxies, CA files) so no hook, driver or helper could ever see the bot's secrets. The
host's global and system config are not read; command-scope config switches off everything that
would run a program named by repository config (hooks, fsmonitor, submodule recursion, the `ext::`
transport) and makes git trust the bot's own folders though a sandboxed command's uid owns them.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

# Passed through from the host because a push to the configured remote may need them.
PUSH_VARIABLES = ("SSH_AUTH_SOCK", "GIT_SSH_COMMAND", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
                  "NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "GIT_SSL_CAINFO", "GIT_SSL_CAPATH",
                  "SSL_CERT_FILE", "SSL_CERT_DIR", "TZ")
IDENTITY_VARIABLES = ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL")
DELIVERY_REMOTE = "crewagent-delivery"  # defined per push from the bot's records, never from repository config
_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class GitPlace:
    """Which repository a command works on, from the bot's own records: never found by searching a folder."""

    git_dir: Path
    work_tree: Path | None = None

    def args(self) -> list[str]:
        out = [f"--git-dir={os.fspath(self.git_dir)}"]
        if self.work_tree is not None:
            out.append(f"--work-tree={os.fspath(self.work_tree)}")
        return out

    def trusted(self) -> tuple[Path, ...]:
        return (self.git_dir,) if self.work_tree is None else (self.work_tree, self.git_dir)


@dataclass(frozen=True)
class EmptyFolders:
    home: Path
    hooks: Path


def empty_folders() -> EmptyFolders:
    """An empty HOME and an empty hooks folder, private to this process (made again if a cleaner took them)."""
    folders = _made_folders()
    if not folders.hooks.is_dir() or not folders.home.is_dir():
        _made_folders.cache_clear()
        folders = _made_folders()
    return folders


@cache
def _made_folders() -> EmptyFolders:
    base = Path(tempfile.mkdtemp(prefix="crewagent-git-"))
    home, hooks = base / "home", base / "hooks"
    home.mkdir(mode=0o700)
    hooks.mkdir(mode=0o700)
    return EmptyFolders(home=home, hooks=hooks)


def command_config(place: GitPlace | None, *, extra: Mapping[str, str] | None = None,
                   trusted: Iterable[str] = ()) -> list[tuple[str, str]]:
    """Config given on the command's scope: it outranks every config file a repository holds."""
    pairs = [
        ("core.hooksPath", os.fspath(empty_folders().hooks)),
        ("core.fsmonitor", "false"),
        ("core.untrackedCache", "false"),
        ("core.attributesFile", os.devnull),
        ("safe.bareRepository", "explicit"),
        ("protocol.ext.allow", "never"),
        ("submodule.recurse", "false"),
        ("fetch.recurseSubmodules", "false"),
        ("push.recurseSubmodules", "no"),
        ("diff.ignoreSubmodules", "all"),
        ("status.submoduleSummary", "false"),
    ]
    folders = [*(os.fspath(p) for p in (place.trusted() if place else ())), *trusted]
    pairs += [("safe.directory", folder) for folder in folders]
    pairs += list((extra or {}).items())
    return pairs


def hardened_env(place: GitPlace | None, *, identity: Mapping[str, str] | None = None,
                 config: Mapping[str, str] | None = None, trusted: Iterable[str] = ()) -> dict[str, str]:
    """The whole environment of one git command: nothing of the bot's own passes unless listed here."""
    env = {
        "PATH": os.environ.get("PATH") or _SYSTEM_PATH,
        "HOME": os.fspath(empty_folders().home),
        "LANG": "C",
        "LC_ALL": "C",  # error texts are classified in English
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_LFS_SKIP_SMUDGE": "1",
        "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
    }
    env.update({name: os.environ[name] for name in PUSH_VARIABLES if os.environ.get(name)})
    env.update({name: value for name, value in (identity or {}).items() if name in IDENTITY_VARIABLES})
    pairs = command_config(place, extra=config, trusted=trusted)
    env["GIT_CONFIG_COUNT"] = str(len(pairs))
    for index, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{index}"] = key
        env[f"GIT_CONFIG_VALUE_{index}"] = value
    return env


def host_settings_env() -> dict[str, str]:
    """Just enough of the host's environment to read the operator's own settings (identity, safe.directory).

    Reading config values never runs a program; this lookup runs outside any repository.
    """
    env = {"PATH": os.environ.get("PATH") or _SYSTEM_PATH, "LANG": "C", "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0"}
    for name in ("HOME", "XDG_CONFIG_HOME", "GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"):
        if os.environ.get(name):
            env[name] = os.environ[name]
    env["GIT_CEILING_DIRECTORIES"] = os.fspath(empty_folders().home.parent)
    return env
