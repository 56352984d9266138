"""A cgroup per command, where the host lets us make one: the process count and the memory of all of a
command's processes together, and a way to end every one of them.

The kernel exempts root from RLIMIT_NPROC, and RLIMIT_AS bounds each process alone (four processes of
200 MB pass a 300 MB limit): only a cgroup bounds the command as a whole. Both hierarchies are
supported, and what exists is detected: cgroup v1 (one group per controller) and v2 (one group for
both); on a hybrid host each controller is taken from where it is mounted.

Groups are named `crewagent-cmd-<pid>-<random>` with the pid of the process that made them: clean-up
at start-up removes only groups whose maker is gone, so several bots on one host never delete each
other's fresh groups. A command joins its group through a gate: the launcher waits on stdin until
this process (which may be root while the launcher is not) has written its pid into the group.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "crewagent-cmd-"
REMOVE_SECONDS = 5.0
GATE = ["/bin/sh", "-c", 'read _ignored && exec "$@" </dev/null', "gate"]
"""Prefix of a command line that waits for one line on stdin (sent once the launcher is in its group)."""
_NAME = re.compile(rf"^{PREFIX}(\d+)-[0-9a-f]+$")
_MB = 1024 * 1024


@dataclass(frozen=True)
class Hierarchy:
    """Where this process may make groups for one or more controllers."""

    version: int  # 1 or 2
    base: Path
    controllers: tuple[str, ...]  # of "pids", "memory"


@dataclass(frozen=True)
class CgroupHost:
    """What this host gives: the hierarchies to make command groups in, and why a controller is missing."""

    hierarchies: tuple[Hierarchy, ...] = ()
    missing: dict[str, str] = field(default_factory=dict)  # controller -> why it cannot be used

    def has(self, controller: str) -> bool:
        return any(controller in h.controllers for h in self.hierarchies)

    def without(self, controller: str, why: str) -> CgroupHost:
        kept = tuple(h for h in (Hierarchy(h.version, h.base, tuple(c for c in h.controllers if c != controller))
                                 for h in self.hierarchies) if h.controllers)
        return CgroupHost(kept, {**self.missing, controller: why})

    @property
    def versions(self) -> str:
        return "+".join(sorted({f"v{h.version}" for h in self.hierarchies}))


@dataclass(frozen=True)
class CommandCgroup:
    """One command's group(s): one path per hierarchy (v1 pids and v1 memory, or one v2 group)."""

    paths: tuple[Path, ...]
    memory: Path | None  # the group holding the memory controller
    memory_version: int = 0
    hierarchies: tuple[Hierarchy, ...] = ()  # one per path, with the bounds set, to make a lost group again
    processes: int = 0
    memory_mb: int | None = None

    @classmethod
    def create(cls, host: CgroupHost, *, processes: int, memory_mb: int | None) -> CommandCgroup | None:
        """Blocking; None when no group could be made (the caller falls back to rlimits)."""
        name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
        made: list[Path] = []
        memory: Path | None = None
        memory_version = 0
        try:
            for hierarchy in host.hierarchies:
                path = hierarchy.base / name
                path.mkdir()
                made.append(path)
                _configure(path, hierarchy, processes=processes, memory_mb=memory_mb)
                if "memory" in hierarchy.controllers:
                    memory, memory_version = path, hierarchy.version
        except OSError:
            cls(tuple(made), None).remove()
            return None
        return cls(tuple(made), memory, memory_version, host.hierarchies, processes, memory_mb) if made else None

    def add(self, pid: int) -> None:
        """Blocking: move a process (and what it will start) into the group. Raises OSError.
        A group removed meanwhile (an older bot's clean-up takes every empty one) is made again."""
        for path, hierarchy in zip(self.paths, self.hierarchies, strict=True):
            for attempt in range(3):
                try:
                    if attempt:
                        with contextlib.suppress(FileExistsError):
                            path.mkdir()
                        _configure(path, hierarchy, processes=self.processes, memory_mb=self.memory_mb)
                    (path / "cgroup.procs").write_text(str(pid))
                    break
                except FileNotFoundError:
                    if attempt == 2:
                        raise

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.paths:
            with contextlib.suppress(OSError, ValueError):
                found.update(int(p) for p in (path / "cgroup.procs").read_text().split())
        return sorted(found)

    def oom_kills(self) -> int:
        """How many of the group's processes the kernel killed for going over the memory bound."""
        if self.memory is None:
            return 0
        events = "memory.events" if self.memory_version == 2 else "memory.oom_control"
        try:
            lines = (self.memory / events).read_text().splitlines()
        except OSError:
            return 0
        counts = dict(line.split(maxsplit=1) for line in lines if " " in line)
        return int(counts.get("oom_kill", "0"))

    def kill_all(self) -> None:
        for _ in range(50):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)

    def remove(self) -> None:
        """Blocking: a group can go only once the kernel has reaped what was killed (a moment)."""
        deadline = time.monotonic() + REMOVE_SECONDS
        for path in self.paths:
            while True:
                self.kill_all()
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)


def _configure(path: Path, hierarchy: Hierarchy, *, processes: int, memory_mb: int | None) -> None:
    if "pids" in hierarchy.controllers:
        (path / "pids.max").write_text(str(processes))
    if "memory" not in hierarchy.controllers or memory_mb is None:
        return
    limit = str(memory_mb * _MB)
    if hierarchy.version == 1:
        (path / "memory.limit_in_bytes").write_text(limit)
        # memory + swap together: absent or refused where the kernel does not account swap
        with contextlib.suppress(OSError):
            (path / "memory.memsw.limit_in_bytes").write_text(limit)
        return
    (path / "memory.max").write_text(limit)
    with contextlib.suppress(OSError):
        (path / "memory.swap.max").write_text("0")
    with contextlib.suppress(OSError):  # the kernel ends every process of the group, not only the largest
        (path / "memory.oom.group").write_text("1")


def remove_stale(host: CgroupHost) -> list[Path]:
    """Groups whose maker is gone (a crash, kill -9): never another live process's, even an empty one
    it has just made and not yet joined. Groups still in use stay (rmdir refuses them)."""
    removed: list[Path] = []
    for hierarchy in host.hierarchies:
        with contextlib.suppress(OSError):
            for path in hierarchy.base.glob(f"{PREFIX}*"):
                match = _NAME.match(path.name)
                if match is None or _alive(int(match.group(1))):
                    continue  # an older naming without an owner, or a live owner's
                with contextlib.suppress(OSError):
                    path.rmdir()
                    removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def detect(wanted: tuple[str, ...] = ("pids", "memory")) -> CgroupHost:
    """Blocking: the writable hierarchies for the wanted controllers (v1 first where a controller is
    mounted there, else v2), and for each missing controller why."""
    try:
        membership = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError as exc:
        return CgroupHost((), {c: f"cannot read this process's cgroups ({exc.strerror})" for c in wanted})
    return host_from(membership, mounts, wanted)


def host_from(membership: list[str], mounts: list[str], wanted: tuple[str, ...]) -> CgroupHost:
    """`detect` from the lines of /proc/self/cgroup and /proc/self/mountinfo (blocking: reads the groups)."""
    v1_rel: dict[str, str] = {}
    v2_rel: str | None = None
    for line in membership:
        _, controllers, rel = line.split(":", 2)
        if controllers == "":
            v2_rel = rel
        for controller in controllers.split(","):
            v1_rel[controller] = rel
    v1_mounts, v2_mount = _cgroup_mounts(mounts)
    hierarchies: list[Hierarchy] = []
    missing: dict[str, str] = {}
    v2_wanted: list[str] = []
    for controller in wanted:
        if controller in v1_rel and controller in v1_mounts:
            mount_point, mount_root = v1_mounts[controller]
            base = mount_point / _below(v1_rel[controller], mount_root)
            if os.access(base, os.W_OK):
                hierarchies.append(Hierarchy(1, base, (controller,)))
            else:
                missing[controller] = f"cgroup v1 {controller}: no write access to this process's group"
        elif v2_rel is not None and v2_mount is not None:
            v2_wanted.append(controller)
        else:
            missing[controller] = f"no {controller} controller is mounted"
    if v2_wanted and v2_mount is not None and v2_rel is not None:
        base, why = _v2_base(v2_mount[0] / _below(v2_rel, v2_mount[1]), v2_mount[0], tuple(v2_wanted))
        usable = tuple(c for c in v2_wanted if c not in why)
        if base is not None and usable:
            hierarchies.append(Hierarchy(2, base, usable))
        missing.update(why)
    return CgroupHost(tuple(hierarchies), missing)


def _cgroup_mounts(mounts: list[str]) -> tuple[dict[str, tuple[Path, str]], tuple[Path, str] | None]:
    """v1 controller -> (mount point, root of the mount), and the cgroup2 mount."""
    v1: dict[str, tuple[Path, str]] = {}
    v2: tuple[Path, str] | None = None
    for line in mounts:
        head, _, tail = line.partition(" - ")
        fields, extra = head.split(), tail.split()
        if len(fields) < 5 or len(extra) < 3:
            continue
        mount_root, mount_point = fields[3], Path(fields[4])
        if extra[0] == "cgroup2" and v2 is None:
            v2 = (mount_point, mount_root)
        elif extra[0] == "cgroup":
            for option in extra[2].split(","):
                v1.setdefault(option, (mount_point, mount_root))
    return v1, v2


def _below(rel: str, mount_root: str) -> str:
    """This process's group relative to a mount whose root may itself be a group (a container's)."""
    if mount_root != "/" and (rel == mount_root or rel.startswith(mount_root + "/")):
        rel = rel[len(mount_root):]
    return rel.lstrip("/")


def _v2_base(own: Path, top: Path, wanted: tuple[str, ...]) -> tuple[Path | None, dict[str, str]]:
    """The nearest group (this process's own or an ancestor) whose children get the wanted controllers
    (all of them, else as many as one group offers). A v2 group with processes cannot give its children
    controllers, so an ancestor usually serves; at the hierarchy's root this process switches them on."""
    if own == top:
        with contextlib.suppress(OSError):
            (own / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in wanted))
    best: tuple[Path, set[str]] | None = None
    candidate: Path | None = own
    while candidate is not None:
        try:
            enabled = set((candidate / "cgroup.subtree_control").read_text().split()) & set(wanted)
        except OSError:
            enabled = set()
        if enabled and os.access(candidate, os.W_OK) and (best is None or len(enabled) > len(best[1])):
            best = (candidate, enabled)
        candidate = None if candidate == top else candidate.parent
    usable = best[1] if best else set()
    why = {c: (f"cgroup v2: {c} is not enabled for the children of this process's group or any "
               "writable ancestor (delegate it, e.g. systemd `Delegate=yes`)") for c in wanted if c not in usable}
    return (best[0] if best else None), why
