"""Crash-safe file writes: a reader sees the old file or the new one, never half of either.

The guarantee is process-crash safety: the new content goes to a temp file beside the target
(`.<name>.tmp.<random hex>`, so the rename never crosses a filesystem) and is renamed over it, so a
process killed at any point leaves either the old or the new file. Nothing is fsynced: what a
finished call wrote is in the OS page cache and survives the process, but durability across a
power cut is out of scope (an fsync costs ~0.15 ms per write on the main disk, for nothing a
process crash needs). Appends are single `write` calls on an O_APPEND descriptor, in the OS as
soon as the call returns.
"""

from __future__ import annotations

import json
import os
import random
import re
import stat
from collections.abc import Callable
from contextlib import ExitStack, suppress
from pathlib import Path
from typing import Any

_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)

Mirror = Callable[[str, bytes, bool], None]
"""Called as mirror(path, data, replaced) after a write below its folder: the whole new file when
`replaced`, else one appended line. Raising fails the write's caller like a disk error would."""

_mirrors: tuple[tuple[str, Mirror], ...] = ()


def add_mirror(folder: str | Path, mirror: Mirror) -> None:
    """Copy every write below `folder` to `mirror`, in the order the writes happen (a shared store
    keeps what a local folder holds, so another process can take over from it)."""
    global _mirrors
    prefix = os.path.join(os.path.realpath(folder), "")
    _mirrors = (*_mirrors, (prefix, mirror))


def remove_mirror(mirror: Mirror) -> None:
    global _mirrors
    _mirrors = tuple(m for m in _mirrors if m[1] is not mirror)


def _mirror(path: str, data: bytes, replaced: bool) -> None:
    for prefix, mirror in _mirrors:
        if path.startswith(prefix):
            mirror(path, data, replaced)


def atomic_write_bytes(path: str | Path, data: bytes, *, owner_from_folder: bool = False) -> None:
    """Replace `path` with `data` in one rename; parent folders are created as needed.

    A replaced file keeps its permission bits; a new one gets the umask's default.
    `owner_from_folder` (files someone else works on, e.g. a worktree that commands edit as an
    unprivileged user): when this process is root, each new folder and the file take the owner and
    group of the folder they are created in, and no setuid or setgid bit is kept.
    """
    target = os.fspath(path)
    folder, name = os.path.split(target)
    tmp = os.path.join(folder, f".{name}.tmp.{random.getrandbits(64):016x}")  # no syscall, unlike urandom
    mode = _existing_mode(target)
    chown = owner_from_folder and os.geteuid() == 0
    try:
        fd = os.open(tmp, _CREATE_FLAGS, 0o666)
    except FileNotFoundError:
        _make_folders(folder or ".", chown=chown)
        fd = os.open(tmp, _CREATE_FLAGS, 0o666)
    with ExitStack() as on_failure:  # the temp file goes, unless it became the target
        on_failure.callback(_remove_if_there, tmp)
        try:
            if chown:
                _take_owner(fd, folder or ".")
                mode = None if mode is None else mode & ~(stat.S_ISUID | stat.S_ISGID)
            if mode is not None:
                os.fchmod(fd, mode)  # despite the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, target)
        on_failure.pop_all()
    if _mirrors:
        _mirror(target, data, True)


def _make_folders(folder: str, *, chown: bool) -> None:
    if not chown:
        os.makedirs(folder, exist_ok=True)
        return
    missing: list[str] = []
    while not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    for child in reversed(missing):
        try:
            os.mkdir(child)
        except FileExistsError:
            continue  # made meanwhile by someone else, or a file (the next mkdir says so)
        owner = os.stat(os.path.dirname(child))
        os.chown(child, owner.st_uid, owner.st_gid, follow_symlinks=False)


def _take_owner(fd: int, folder: str) -> None:
    owner = os.stat(folder)
    os.fchown(fd, owner.st_uid, owner.st_gid)  # before the rename: the file appears with its owner


def _remove_if_there(path: str) -> None:
    with suppress(FileNotFoundError):
        os.unlink(path)


_TEMP_NAME = re.compile(r"^\..+\.tmp\.[0-9a-f]{16}$")


def remove_stale_temps(folder: str | Path) -> list[str]:
    """Delete the temp files atomic_write_bytes left in `folder` when the process died mid-write.

    Call only while nothing else writes there (a run's state folder before its pump starts).
    Returns the names removed.
    """
    removed = []
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return removed
    for entry in entries:
        if _TEMP_NAME.match(entry.name) and entry.is_file(follow_symlinks=False):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
            removed.append(entry.name)
    return removed


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, ensure_ascii=False, indent=2) + "\n")


def append_line(path: str | Path, line: bytes) -> None:
    """One `write` on an O_APPEND descriptor: lines from concurrent writers never interleave."""
    fd = _open_append(path)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    if _mirrors:
        _mirror(os.fspath(path), line, False)


class AppendLog:
    """A log file appended to line by line, each line one `write` (as append_line) before returning.

    While held (a pump writing its logs), the descriptor stays open between lines: a turn appends
    about ten lines, and opening the file for each was most of their cost. Only hold a log that no
    one replaces meanwhile (a replaced file would keep receiving lines through the old descriptor).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = os.fspath(path)
        self._held = False
        self._fd: int | None = None

    def write(self, line: bytes) -> None:
        if not self._held:
            append_line(self.path, line)
            return
        if self._fd is None:
            self._fd = _open_append(self.path)
        os.write(self._fd, line)
        if _mirrors:
            _mirror(self.path, line, False)

    def hold(self) -> None:
        """Keep the descriptor open from the next line until release()."""
        self._held = True

    def release(self) -> None:
        self._held = False
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def _open_append(path: str | Path) -> int:
    try:
        return os.open(path, _APPEND_FLAGS, 0o666)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(os.fspath(path)) or ".", exist_ok=True)
        return os.open(path, _APPEND_FLAGS, 0o666)


def _existing_mode(path: str) -> int | None:
    try:
        return os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        return None
