"""No setuid or setgid bit survives a command in the project: the seccomp filter refuses setting one, and
after every command this sweep clears any that got there anyway (an archive unpacked with them, a call the
filter does not know). A setuid file in the worktree would let anyone on the host run it as the sandbox user.

The sweep runs in a thread after the command has returned its result, so a big tree (a node_modules) does
not hold up the answer; the next command in the same project waits for it before it starts. The scan
never follows a symlink; a file it finds is reopened one folder at a time, each with O_NOFOLLOW,
so a folder swapped for a symlink meanwhile (another command of the run) cannot point the bot, root, at a
file outside the project. Cost: a stat per file and folder, 3 to 20 ms per thousand (an idle or a busy host).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)
SPECIAL = stat.S_ISUID | stat.S_ISGID
_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
_pending: dict[Path, asyncio.Task[None]] = {}  # the last sweep started in each project


def sweep_after(project: Path) -> None:
    """Start clearing the project in the background (after any sweep still running there)."""
    task = asyncio.create_task(_sweep(project, _pending.get(project)))
    _pending[project] = task
    task.add_done_callback(lambda done: _pending.pop(project) if _pending.get(project) is done else None)


async def swept(project: Path) -> None:
    """Wait until every sweep started in the project has ended (before the next command starts there)."""
    task = _pending.get(project)
    if task is not None:
        await asyncio.shield(task)


async def _sweep(project: Path, before: asyncio.Task[None] | None) -> None:
    if before is not None:
        await before
    try:
        await asyncio.to_thread(clear_special_bits, project)
    except OSError as exc:
        log.error("the project could not be cleared of setuid/setgid bits: %s", exc)


def clear_special_bits(project: Path) -> int:
    """Blocking: clear setuid/setgid on every file and folder under `project` (not its `.git`); how many it cleared."""
    found = _marked(str(project))
    cleared = sum(1 for rel in found if _clear(project, rel))
    if cleared:
        log.warning("a command left %d setuid/setgid file(s) in the project; the bits were cleared", cleared)
    return cleared


def _marked(project: str) -> list[tuple[str, ...]]:
    """Paths (as name tuples below the project; the project itself is ()) whose mode carries a special bit."""
    out: list[tuple[str, ...]] = [()] if os.lstat(project).st_mode & SPECIAL else []
    folders: list[tuple[str, tuple[str, ...]]] = [(project, ())]
    while folders:
        folder, rel = folders.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if not rel and entry.name == ".git":
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_mode & SPECIAL:
                    out.append((*rel, entry.name))
                if entry.is_dir(follow_symlinks=False):
                    folders.append((entry.path, (*rel, entry.name)))
    return out


def _clear(project: Path, rel: tuple[str, ...]) -> bool:
    try:
        fd = os.open(project, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        for name in rel:
            next_fd = os.open(name, os.O_RDONLY | _NO_FOLLOW, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        mode = os.fstat(fd).st_mode
        if not mode & SPECIAL or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            return False
        os.fchmod(fd, stat.S_IMODE(mode) & ~SPECIAL)
        return True
    except OSError:  # swapped for a symlink, a socket or gone: nothing to clear through this path
        return False
    finally:
        os.close(fd)
