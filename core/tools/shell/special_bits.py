"""No setuid or setgid bit survives a command in the project: the seccomp filter refuses setting one, and
after every command this sweep clears any that got there anyway (an archive unpacked with them, a call the
filter does not know). A setuid file in the worktree would let anyone on the host run it as the sandbox user.

The walk goes through folder descriptors and never follows a symlink, so nothing outside the project is
touched; the command has ended by then. Cost: about 1 ms per thousand files.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)
SPECIAL = stat.S_ISUID | stat.S_ISGID
_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


def clear_special_bits(project: Path) -> int:
    """Blocking: clear setuid/setgid on every file and folder under `project` (not its `.git`); how many it cleared."""
    cleared = 0
    for folder, dirs, files, folder_fd in os.fwalk(project):
        if folder == str(project):
            dirs[:] = [d for d in dirs if d != ".git"]
        if folder == str(project) and _clear(folder_fd):
            cleared += 1
        for name in (*dirs, *files):
            with contextlib.suppress(OSError):
                if os.stat(name, dir_fd=folder_fd, follow_symlinks=False).st_mode & SPECIAL and _clear_at(folder_fd, name):
                    cleared += 1
    if cleared:
        log.warning("a command left %d setuid/setgid file(s) in the project; the bits were cleared", cleared)
    return cleared


def _clear_at(folder_fd: int, name: str) -> bool:
    try:
        fd = os.open(name, _OPEN_FLAGS, dir_fd=folder_fd)
    except OSError:  # a socket or a device: it cannot be run
        return False
    try:
        return _clear(fd)
    finally:
        os.close(fd)


def _clear(fd: int) -> bool:
    mode = os.fstat(fd).st_mode
    if not mode & SPECIAL or not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return False
    os.fchmod(fd, stat.S_IMODE(mode) & ~SPECIAL)
    return True
