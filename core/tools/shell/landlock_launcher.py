"""Landlock for a sandboxed command: a few lines of Python that run inside the sandbox, after bwrap's mounts
(a Landlock-restricted process may not mount), restrict themselves and then exec the command.

The ruleset handles every write right the kernel knows (ABI 1-3) and, from ABI 6, scopes abstract Unix
sockets and signals to the sandbox: reading stays open everywhere, writing only beneath the folders given.
The launcher fails closed: when the kernel refuses the ruleset the command does not run.

It runs the host's own `python3` with `-I -S` (no environment, no site), which costs one interpreter start
per command; see `commands.landlock` for when it is used.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache

_CREATE_RULESET, _VERSION_FLAG = 444, 1  # x86_64, aarch64 and every architecture since 5.13 share the numbers
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
WRITABLE = ("/@project", "/tmp", "/dev/shm", "/dev/null", "/dev/zero", "/dev/full")

LAUNCHER = r"""
import ctypes, os, stat, struct, sys
args = sys.argv[1:]
cut = args.index("--")
writable, command = args[:cut], args[cut + 1:]
libc = ctypes.CDLL(None, use_errno=True)
call = libc.syscall
call.restype = ctypes.c_long
def fail(what):
    sys.stderr.write("sandbox: Landlock could not be applied (%s: %s); the command did not run\n"
                     % (what, os.strerror(ctypes.get_errno())))
    sys.exit(126)
abi = call(444, None, 0, 1)
if abi < 1:
    fail("not in this kernel")
write = 0b1111111110010 | (1 << 13 if abi >= 2 else 0) | (1 << 14 if abi >= 3 else 0)
file_rights = (1 << 1) | (1 << 14 if abi >= 3 else 0)
attr = (ctypes.c_uint64 * 3)(write, 0, 3 if abi >= 6 else 0)
ruleset = call(444, attr, 24 if abi >= 6 else (16 if abi >= 4 else 8), 0)
if ruleset < 0:
    fail("create")
for path in writable:
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        continue
    rights = write if stat.S_ISDIR(os.fstat(fd).st_mode) else file_rights
    rule = ctypes.create_string_buffer(struct.pack("<Qi", rights, fd), 12)
    if call(445, ruleset, 1, rule, 0) != 0:
        fail("rule for " + path)
    os.close(fd)
if libc.prctl(38, 1, 0, 0, 0) != 0 or call(446, ruleset, 0) != 0:
    fail("restrict")
os.execvp(command[0], command)
"""


@cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where it has none (or it is switched off at boot)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return 0
    libc.syscall.restype = ctypes.c_long
    version = libc.syscall(_CREATE_RULESET, None, 0, _VERSION_FLAG)
    return max(int(version), 0)


@cache
def launcher_python() -> str | None:
    """The host's python3 under /usr, which every sandbox sees; None when there is none."""
    return next((p for p in PYTHONS if os.access(p, os.X_OK)), None)


def launcher_prefix(python: str) -> list[str]:
    """The words before the command: restrict, then exec what follows `--`."""
    return [python, "-I", "-S", "-c", LAUNCHER, *WRITABLE, "--"]
