"""Every socket file in a folder the sandbox sees is covered with /dev/null.

A read-only bind does not stop `connect()`: a Unix socket of a host daemon inside a toolchain folder,
the package or a system folder would let a command talk to that daemon, outside every namespace.
System folders are searched once per process; the other read-only folders again after
RESCAN_SECONDS; the worktree before every command (sockets a command left behind are covered too),
by the walk that measures its size.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from .disk_usage import find_sockets
from .sandbox_layout import GIT, GIT_OBJECTS, PKG, PROJECT, SYSTEM_DIRS, Layout

RESCAN_SECONDS = 300.0
_found: dict[str, tuple[float, tuple[str, ...]]] = {}  # folder -> (when searched, socket paths relative to it)
_lock = threading.Lock()


def socket_mask_args(layout: Layout, project_sockets: tuple[str, ...]) -> list[str]:
    """Blocking: bwrap options covering each socket file of the visible folders (after their binds).
    The worktree's were found by the walk that measures it (disk_usage.folder_usage)."""
    visible = [(Path(f), f, float("inf")) for f in SYSTEM_DIRS if os.path.isdir(f) and not os.path.islink(f)]
    visible += [(t, str(t), RESCAN_SECONDS) for t in layout.toolchain]
    visible += [(Path(h), i, RESCAN_SECONDS) for h, i in layout.extra_read_only if os.path.isdir(h)]
    visible.append((layout.pkg, PKG, RESCAN_SECONDS))
    if layout.git is not None:
        visible.append((layout.git.git_dir, GIT, RESCAN_SECONDS))
        if layout.git.borrowed_objects is not None:
            visible.append((layout.git.borrowed_objects, GIT_OBJECTS, RESCAN_SECONDS))
    masked = layout.off_limits.paths()  # already covered (bwrap._masks)
    out: list[str] = []
    for host, inside, fresh_for in visible:
        for rel in _cached(host, fresh_for):
            if not any(m == host / rel or m in (host / rel).parents for m in masked):
                out += ["--ro-bind", "/dev/null", f"{inside}/{rel}"]
    for rel in project_sockets:
        if not any(m == layout.project / rel or m in (layout.project / rel).parents for m in masked):
            out += ["--ro-bind", "/dev/null", f"{PROJECT}/{rel}"]
    return out


def _cached(folder: Path, fresh_for: float) -> tuple[str, ...]:
    key = str(folder)
    with _lock:
        known = _found.get(key)
    if known is not None and time.monotonic() - known[0] < fresh_for:
        return known[1]
    sockets = find_sockets(folder)
    with _lock:
        _found[key] = (time.monotonic(), sockets)
    return sockets
