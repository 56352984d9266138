"""A pids cgroup per command, where the host lets us make one: the process count bound that holds even
for a bot running as root (the kernel exempts root from RLIMIT_NPROC), and a way to end every process.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

_V1 = Path("/sys/fs/cgroup/pids")
_V2 = Path("/sys/fs/cgroup")
REMOVE_SECONDS = 5.0


@dataclass(frozen=True)
class PidsCgroup:
    path: Path

    @classmethod
    def create(cls, limit: int) -> PidsCgroup | None:
        """Blocking; None when there is no writable pids controller."""
        base = _own_cgroup()
        if base is None:
            return None
        path = base / f"crewagent-cmd-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
        except OSError:
            return None
        try:
            (path / "pids.max").write_text(str(limit))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            return None
        return cls(path)

    def join_then(self) -> list[str]:
        """A prefix that moves the process into the cgroup and then runs the rest of the command line."""
        return ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs")]

    def kill_all(self) -> None:
        for _ in range(50):
            try:
                pids = [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
            except (OSError, ValueError):
                return
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Blocking: the cgroup can go only once the kernel has reaped what was killed (a moment)."""
        deadline = time.monotonic() + REMOVE_SECONDS
        while True:
            self.kill_all()
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)


def remove_stale() -> None:
    """Empty cgroups a previous process left (rmdir fails on any still in use)."""
    base = _own_cgroup()
    if base is None:
        return
    for path in base.glob("crewagent-cmd-*"):
        with contextlib.suppress(OSError):
            path.rmdir()


def _own_cgroup() -> Path | None:
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, rel = line.split(":", 2)
        if "pids" in controllers.split(","):
            base = _V1 / rel.lstrip("/")
            return base if os.access(base, os.W_OK) else None
        if controllers == "" and (_V2 / "cgroup.controllers").is_file():
            base = _V2 / rel.lstrip("/")
            try:
                enabled = (base / "cgroup.subtree_control").read_text().split()
            except OSError:
                return None
            return base if "pids" in enabled and os.access(base, os.W_OK) else None
    return None
