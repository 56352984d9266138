"""Watches one running command against the bounds the kernel cannot hold alone: what it adds to disk
(the worktree plus its in-memory /tmp and /dev), and whether its memory cgroup had to kill a process.

The worktree is the real folder, so its growth is sampled: the baseline is walked before the command
starts, then a walk in a thread again and again, after max(MIN_INTERVAL, WALK_SHARE × the last walk's time),
so a large worktree costs at most about a tenth of a core. A command can overshoot by what it writes
between two samples; one more walk after it ends catches what was left. RLIMIT_FSIZE still bounds any
one file, and /tmp (a tmpfs) is sized to the whole budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from .command_cgroup import CommandCgroup
from .disk_usage import folder_usage

Breach = Literal["memory", "disk"]
MIN_INTERVAL = 0.25
MAX_INTERVAL = 5.0
WALK_SHARE = 10.0
SANDBOX_TMPFS = ("tmp", "dev")  # writable memory-backed folders inside the sandbox
_MB = 1024 * 1024


@dataclass
class BoundsWatch:
    """One command's disk budget and memory cgroup; `watch()` ends when a bound is passed."""

    project: Path
    disk_mb: int
    baseline: int  # what the worktree held when the command started (disk_usage.folder_usage)
    cgroup: CommandCgroup | None = None
    sandboxed: bool = True
    added_bytes: int = 0  # the largest addition seen so far
    _launcher: int | None = None
    _inside: int | None = None  # a process inside the sandbox's mount namespace
    _tmpfs_bytes: int = 0
    _walk_seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)  # a cancelled sample's thread may still run

    @property
    def added_mb(self) -> int:
        return -(-self.added_bytes // _MB)

    async def watch(self, launcher_pid: int) -> Breach:
        """Samples until a bound is passed (the caller cancels it when the command ends first)."""
        self._launcher = launcher_pid
        while True:  # the baseline was just walked: the first sample waits like the others
            await asyncio.sleep(min(MAX_INTERVAL, max(MIN_INTERVAL, WALK_SHARE * self._walk_seconds)))
            breach = await self.check()
            if breach is not None:
                return breach

    async def check(self, *, final: bool = False) -> Breach | None:
        """One sample (a thread does the walk). `final`: the command has ended, its sandbox is gone."""
        return await asyncio.to_thread(self._sample, final)

    def _sample(self, final: bool) -> Breach | None:
        with self._lock:
            return self._measure(final)

    def _measure(self, final: bool) -> Breach | None:
        if self.cgroup is not None and self.cgroup.oom_kills() > 0:
            return "memory"
        started = time.monotonic()
        used = folder_usage(self.project).bytes_used
        self._walk_seconds = time.monotonic() - started
        if self.sandboxed and not final:
            self._tmpfs_bytes = self._sandbox_tmpfs_bytes()
        self.added_bytes = max(self.added_bytes, used - self.baseline + self._tmpfs_bytes)
        return "disk" if self.added_bytes > self.disk_mb * _MB else None

    def _sandbox_tmpfs_bytes(self) -> int:
        """What the command holds in its /tmp and /dev, seen through a process of the sandbox (once the
        sandbox has its own root: before that, the paths would name the host's folders)."""
        for _ in range(2):
            pid = self._inside if self._inside is not None else self._find_inside()
            if pid is None:
                return self._tmpfs_bytes
            try:
                if os.stat(f"/proc/{pid}/root").st_dev == os.stat("/").st_dev:
                    self._inside = None
                    return self._tmpfs_bytes  # still being set up
                total = 0
                for folder in SANDBOX_TMPFS:
                    fs = os.statvfs(f"/proc/{pid}/root/{folder}")
                    if folder == "tmp" and fs.f_blocks * fs.f_frsize > (self.disk_mb + 1) * _MB:
                        return self._tmpfs_bytes  # not the sandbox's own /tmp (sized to the budget)
                    total += (fs.f_blocks - fs.f_bfree) * fs.f_frsize
                return total
            except OSError:
                self._inside = None  # that process ended: look for another
        return self._tmpfs_bytes

    def _find_inside(self) -> int | None:
        own = _mount_ns(os.getpid())
        candidates = self.cgroup.pids() if self.cgroup is not None else _children(self._launcher)
        for pid in candidates:
            namespace = _mount_ns(pid)
            if namespace is not None and namespace != own:
                self._inside = pid
                return pid
        return None


def _mount_ns(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/mnt").st_ino
    except OSError:
        return None


def _children(parent: int | None) -> list[int]:
    """Processes whose parent is `parent` (without a cgroup: the sandbox's first process)."""
    if parent is None:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stat_line = Path(f"/proc/{entry}/stat").read_text()
                if int(stat_line.rsplit(")", 1)[1].split()[1]) == parent:
                    found.append(int(entry))
    return found
