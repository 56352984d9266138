"""The seccomp program every sandboxed command runs under: what a build or a test suite never needs is refused.

bwrap loads it (`--seccomp FD`) after setting no_new_privs, just before it starts the command, so the
refusals hold for the command and everything it starts. The program is compiled once per process with
libseccomp (through pyseccomp) and handed over a pipe, like bwrap's other data.

Refused with EPERM: mounting and changing root, kernel modules and kexec, bpf, perf_event_open, the
keyring, ptrace and reading or writing other processes' memory, new namespaces (unshare, setns, clone
with a CLONE_NEW* flag), io_uring (it reaches files and sockets past this filter), acct, quotactl, swap,
reboot, syslog, injecting terminal input (TIOCSTI, TIOCLINUX), personality changes, userfaultfd, and
setting a setuid or setgid bit (chmod family, or a file or folder created with one). With ENOSYS, so
that libc falls back to what the filter can judge: clone3 (its flags sit in memory a filter cannot
read), openat2 (its mode too) and the new mount API. 32-bit calls on a 64-bit host get the same rules.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from dataclasses import dataclass
from functools import cache

log = logging.getLogger(__name__)

_REFUSED = (
    "mount", "umount", "umount2", "pivot_root", "chroot",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
    "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
    "ptrace", "process_vm_readv", "process_vm_writev",
    "unshare", "setns", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "acct", "quotactl", "quotactl_fd", "swapon", "swapoff", "reboot", "syslog", "userfaultfd",
    "uselib", "open_by_handle_at",
)
_NOT_THERE = ("clone3", "openat2", "open_tree", "move_mount", "fsopen", "fsconfig", "fsmount",
              "fspick", "mount_setattr")
_NUMBERS = {"fchmodat2": 452}  # newer than older libseccomp tables (the same number on every architecture)
_NEW_NAMESPACES = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000)
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_SPECIAL_BITS = (stat.S_ISUID, stat.S_ISGID)
_MODE_ARGUMENT = {"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2, "mkdir": 1, "mkdirat": 2,
                  "mknod": 1, "mknodat": 2, "creat": 1}
_CREATING_OPEN = {"open": (1, 2), "openat": (2, 3)}  # flags argument, mode argument
_CREATING_FLAGS = (os.O_CREAT, 0o20000000)  # O_CREAT, __O_TMPFILE


@dataclass(frozen=True)
class FilterProgram:
    """The compiled program, or why there is none (then commands run without it and the start-up line says so)."""

    program: bytes | None
    problem: str | None = None
    refused: int = 0  # how many system calls it refuses outright or judges by their arguments


@cache
def filter_program() -> FilterProgram:
    """Blocking, once per process (a millisecond)."""
    try:
        import pyseccomp as seccomp  # type: ignore[import-untyped]
    except (ImportError, RuntimeError, OSError) as exc:  # pyseccomp raises RuntimeError without libseccomp
        return FilterProgram(None, f"libseccomp is not installed here ({exc}); install libseccomp2")
    try:
        return _compile(seccomp)
    except OSError as exc:
        log.error("the seccomp program cannot be built: %s", exc)
        return FilterProgram(None, f"libseccomp cannot build the program ({exc})")


def _compile(seccomp) -> FilterProgram:  # type: ignore[no-untyped-def]
    program = seccomp.SyscallFilter(seccomp.ALLOW)
    with contextlib.suppress(OSError):  # a binary tree: every allowed call passes a few checks, not the whole list
        program.set_attr(seccomp.Attr.CTL_OPTIMIZE, 2)
    if seccomp.system_arch() == seccomp.Arch.X86_64:
        program.add_arch(seccomp.Arch.X86)  # int 0x80 calls would otherwise get around the rules
    eperm, enosys, arg = seccomp.ERRNO(errno.EPERM), seccomp.ERRNO(errno.ENOSYS), seccomp.Arg

    def rule(action: int, name: str, *conditions: object) -> bool:
        call = _syscall(seccomp, name)
        if call is None:
            return False
        program.add_rule(action, call, *conditions)
        return True

    judged = {name for name in _REFUSED if rule(eperm, name)} | {name for name in _NOT_THERE if rule(enosys, name)}
    for flag in _NEW_NAMESPACES:
        if rule(eperm, "clone", arg(0, seccomp.MASKED_EQ, flag, flag)):
            judged.add("clone")
    for command in (_TIOCSTI, _TIOCLINUX):
        if rule(eperm, "ioctl", arg(1, seccomp.MASKED_EQ, 0xFFFFFFFF, command)):
            judged.add("ioctl")
    if rule(eperm, "personality", arg(0, seccomp.NE, 0)):
        judged.add("personality")
    for bit in _SPECIAL_BITS:
        for name, index in _MODE_ARGUMENT.items():
            if rule(eperm, name, arg(index, seccomp.MASKED_EQ, bit, bit)):
                judged.add(name)
        for name, (flags, mode) in _CREATING_OPEN.items():
            for creating in _CREATING_FLAGS:
                if rule(eperm, name, arg(flags, seccomp.MASKED_EQ, creating, creating), arg(mode, seccomp.MASKED_EQ, bit, bit)):
                    judged.add(name)
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(write_end, "wb") as sink:
            program.export_bpf(sink)
        data = os.read(read_end, 1 << 20)
    finally:
        os.close(read_end)
    return FilterProgram(data, refused=len(judged))


def _syscall(seccomp, name: str) -> str | int | None:  # type: ignore[no-untyped-def]
    """The name where libseccomp knows the call (it maps it for each architecture), its number where the call is
    newer than libseccomp's table, None where this architecture has no such call."""
    if seccomp.resolve_syscall(seccomp.Arch.NATIVE, name) != -1:  # -1: unknown; other negatives are pseudo-numbers
        return name
    return _NUMBERS.get(name) if seccomp.system_arch() in (seccomp.Arch.X86_64, seccomp.Arch.AARCH64) else None
