"""Runs one stdio MCP server so that it cannot outlive the bot (stdlib only: started as a script).

The SDK starts this launcher in a new process group; the launcher asks Linux to send it SIGTERM
when the bot dies (PR_SET_PDEATHSIG, so even after kill -9 of the bot), watches its parent as a
fallback elsewhere, and starts the server in the same group. On SIGTERM, on the parent's death or
when the server exits, the whole group is ended: the server and anything it started.

Usage: python launcher.py COMMAND [ARG ...]
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time

PR_SET_PDEATHSIG = 1
GRACE_SECONDS = 3.0


def _ask_for_parent_death_signal() -> None:
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _end_group(child: subprocess.Popen[bytes] | None, *, hard: bool = True) -> None:
    """SIGTERM to the group (not to ourselves), then SIGKILL to whatever is left (ourselves too)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        os.killpg(os.getpgid(0), signal.SIGTERM)
    except OSError:
        pass
    deadline = time.monotonic() + GRACE_SECONDS
    while child is not None and child.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not hard:
        return
    try:
        os.killpg(os.getpgid(0), signal.SIGKILL)
    except OSError:
        pass


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: launcher.py COMMAND [ARG ...]", file=sys.stderr)
        return 2
    parent = os.getppid()
    _ask_for_parent_death_signal()
    child: subprocess.Popen[bytes] | None = None

    def on_signal(signum: int, _frame: object) -> None:
        _end_group(child)
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    if os.getppid() != parent:  # the bot died before the signal was armed
        _end_group(None)
        return 1
    try:
        child = subprocess.Popen(argv)
    except OSError as exc:
        print(f"cannot start the MCP server: {exc.strerror or exc}", file=sys.stderr)
        return 127

    def watch_parent() -> None:  # for systems without PR_SET_PDEATHSIG
        while os.getppid() == parent:
            time.sleep(1.0)
        on_signal(signal.SIGTERM, None)

    threading.Thread(target=watch_parent, daemon=True).start()
    code = child.wait()
    _end_group(None, hard=False)  # the server is gone: nothing it started may stay
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
