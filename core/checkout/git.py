"""The `git` command line, run as an asyncio subprocess: never blocks the loop, always has a timeout.

Each call runs in its own process group, so a timeout kills git and everything it started (ssh,
credential helpers). Git is told never to prompt: a missing credential fails at once instead of
waiting for a terminal nobody watches. The repository is named from the bot's records (`GitPlace`)
and the environment is built by `git_env`, never inherited: see there for what a push may use.
Nothing here stores or prints credentials, and error text is scrubbed before it is kept.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..base.errors import CrewError
from .git_env import GitPlace, hardened_env
from .urls import for_log

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 120.0
GIT_BINARY = "git"


class GitError(CrewError):
    """A git call that failed or timed out. `detail` is git's own (scrubbed) words, for the log only."""

    def __init__(self, code: str, message: str, *, detail: str = "", command: str = "") -> None:
        super().__init__(code, message)
        self.detail = detail
        self.command = command


@dataclass(frozen=True)
class GitResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


async def run_git(
    args: Sequence[str],
    *,
    place: GitPlace | None = None,
    cwd: str | Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    identity: Mapping[str, str] | None = None,
    config: Mapping[str, str] | None = None,
    trusted: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
) -> GitResult:
    """`git ARGS` on `place` (in `cwd` only to find or clone one); `env` only to read the host's settings.

    A non-zero exit is a result; a timeout or a missing git is a GitError."""
    command = _label(args)
    if cwd is None:
        assert place is not None, "a git command needs a repository from the records or a folder"
        cwd = place.work_tree or place.git_dir
    full_env = dict(env) if env is not None else hardened_env(place, identity=identity, config=config, trusted=trusted)
    try:
        proc = await asyncio.create_subprocess_exec(
            GIT_BINARY,
            *(place.args() if place else ()),
            *args,
            cwd=os.fspath(cwd),
            env=full_env,
            stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        if not os.path.isdir(cwd):
            raise GitError("GIT_NO_FOLDER", "The project folder does not exist (any more).", command=command) from None
        raise GitError("GIT_NOT_INSTALLED", "git is not installed on the server.", command=command) from None
    except OSError as exc:
        raise GitError(
            "GIT_FAILED", "git could not be started on the server.", detail=exc.strerror or "", command=command
        ) from None
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin.encode() if stdin is not None else None), timeout)
    except (asyncio.TimeoutError, asyncio.CancelledError) as exc:
        _kill_group(proc)
        await proc.wait()
        if isinstance(exc, asyncio.CancelledError):
            raise
        log.warning("git timed out", extra={"command": command, "timeout": timeout})
        raise GitError(
            "GIT_TIMEOUT", f"git took longer than {timeout:g} seconds and was stopped.", command=command
        ) from None
    stderr = for_log(err.decode("utf-8", "replace"))  # kept for logs: no credentials, no paths
    return GitResult(proc.returncode or 0, out.decode("utf-8", "replace"), stderr)


async def git_ok(
    args: Sequence[str],
    *,
    place: GitPlace | None = None,
    cwd: str | Path | None = None,
    timeout: float = DEFAULT_TIMEOUT,
    identity: Mapping[str, str] | None = None,
    config: Mapping[str, str] | None = None,
) -> str:
    """stdout of a git call that must succeed; otherwise GitError with git's scrubbed words as detail."""
    result = await run_git(args, place=place, cwd=cwd, timeout=timeout, identity=identity, config=config)
    if not result.ok:
        command = _label(args)
        raise GitError(
            "GIT_FAILED", f"`{command}` failed.", detail=result.stderr.strip()[-2000:], command=command
        )
    return result.stdout


def _label(args: Sequence[str]) -> str:
    """`git <subcommand>` for messages and logs (the other arguments may hold paths or URLs)."""
    sub = next((a for a in args if not a.startswith("-") and "=" not in a), "")
    return f"git {sub}".strip()


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
