"""Opening files that must be plain files: never a FIFO, socket or device.

Opening a FIFO for reading waits for a writer, forever, and a device can stream without end. A
path inside the project can be either (a checkout can hold them, and a hostile one will), so
reads check the type before opening, and open without blocking in case the path changed since.
"""

from __future__ import annotations

import os
import stat
from contextlib import ExitStack
from typing import BinaryIO

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class NotRegularFile(OSError):
    """The path exists but is not a plain file (nor a folder)."""


def check_regular(path: str | os.PathLike[str]) -> os.stat_result:
    """stat() the path: IsADirectoryError for folders, NotRegularFile for FIFOs, sockets, devices."""
    st = os.stat(path)
    _check_mode(st, path)
    return st


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """Open a plain file for binary reading, or raise (see check_regular) without ever blocking."""
    check_regular(path)
    fd = os.open(path, _FLAGS)
    with ExitStack() as on_failure:  # the descriptor is closed unless it is handed out
        on_failure.callback(os.close, fd)
        _check_mode(os.fstat(fd), path)  # the path may have been swapped since the stat
        os.set_blocking(fd, True)
        opened = os.fdopen(fd, "rb")
        on_failure.pop_all()
    return opened


def read_regular(path: str | os.PathLike[str]) -> bytes:
    with open_regular(path) as fh:
        return fh.read()


def _check_mode(st: os.stat_result, path: str | os.PathLike[str]) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "Is a directory", str(path))
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(0, "not a plain file", str(path))
