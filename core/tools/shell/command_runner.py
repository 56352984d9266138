"""One process started, read and ended without blocking the event loop.

The process gets its own session (so one kill reaches its group); stdin is empty; both streams
are read as they come into an OutputCapture. A timeout, a cancellation (`*stop`, shutdown) or
the end of the command itself end everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .bounds_watch import BoundsWatch
from .command_cgroup import CommandCgroup
from .output_capture import OutputCapture

log = logging.getLogger(__name__)
READ_CHUNK = 65_536
DRAIN_SECONDS = 5.0  # after the process ended, how long its pipes may stay open (a daemon in sandbox: none)
REAP_SECONDS = 10.0
STOP_CHECK_SECONDS = 0.25  # how soon a stopped run's command is killed
FINAL_CHECK_SECONDS = 30.0  # the walk of the worktree after a command ended


@dataclass
class Finished:
    exit_code: int | None  # None: killed before it ended by itself
    duration_ms: int
    killed: str | None  # "timeout", "stopped", or a bound passed: "memory", "disk" (exit_code set if it ended first)
    disk_added_mb: int | None = None  # what it added to the worktree and its /tmp, when watched


def open_data_pipes(blobs: Sequence[bytes]) -> list[int]:
    """Read ends of pipes already holding each blob (small: they must fit in a pipe's buffer)."""
    fds: list[int] = []
    try:
        for blob in blobs:
            read_end, write_end = os.pipe()
            fds.append(read_end)
            try:
                os.write(write_end, blob)
            finally:
                os.close(write_end)
    except OSError:
        close_fds(fds)
        raise
    return fds


def close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


async def run(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str,
    timeout: float,
    capture: OutputCapture,
    pass_fds: Sequence[int] = (),
    cgroup: CommandCgroup | None = None,
    executable: str | None = None,
    stop: Callable[[], bool] | None = None,
    watch: BoundsWatch | None = None,
) -> Finished:
    """Run argv to its end or its timeout. Raises OSError when it cannot start; cancellation kills it.
    With a cgroup, argv starts with command_cgroup.GATE: the process is let go once it is in the group.
    Takes over `pass_fds`: they are closed once the process has started (or failed to)."""
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if cgroup is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
            executable=executable,
        )
    finally:  # the child has its copies; closed here once (a later close could hit a reused number)
        close_fds(pass_fds)
    if cgroup is not None:
        await _let_in(proc, cgroup)
    readers = [
        asyncio.create_task(_read(proc.stdout, "stdout", capture)),
        asyncio.create_task(_read(proc.stderr, "stderr", capture)),
    ]
    killed: str | None = None
    exited = _exit_of(proc)
    watching = asyncio.ensure_future(watch.watch(proc.pid)) if watch is not None else None
    try:
        killed = await _wait(exited, started + timeout, stop, watching)
    except asyncio.CancelledError:
        await _end(proc, cgroup, readers)
        raise
    finally:
        exited.cancel()
        if watching is not None:
            watching.cancel()
    duration_ms = round((time.monotonic() - started) * 1000)
    await _end(proc, cgroup, readers)  # whatever it left behind (a daemon holding the pipes) ends too
    exit_code = None if killed else proc.returncode
    if watch is not None and killed is None:
        killed = await _final_check(watch)
    return Finished(exit_code=exit_code, duration_ms=duration_ms, killed=killed,
                    disk_added_mb=watch.added_mb if watch is not None else None)


async def _final_check(watch: BoundsWatch) -> str | None:
    """What the command left on disk, or a process the kernel killed for memory (None if unknown)."""
    try:
        return await asyncio.wait_for(watch.check(final=True), FINAL_CHECK_SECONDS)
    except TimeoutError:
        log.warning("the command's disk use could not be measured within %s s", FINAL_CHECK_SECONDS)
        return None


async def _let_in(proc: asyncio.subprocess.Process, cgroup: CommandCgroup) -> None:
    """Move the waiting launcher into the command's group, then open its gate (one line on stdin)."""
    try:
        await asyncio.to_thread(cgroup.add, proc.pid)
    except (OSError, asyncio.CancelledError):
        _kill_group(proc.pid, cgroup)
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.shield(asyncio.wait_for(proc.wait(), REAP_SECONDS))
        raise
    assert proc.stdin is not None
    with contextlib.suppress(ConnectionError):
        proc.stdin.write(b"\n")
        await proc.stdin.drain()
    proc.stdin.close()


def _exit_of(proc: asyncio.subprocess.Process) -> asyncio.Future[None]:
    """Done when the process itself exits, even while something it left behind holds its pipes open
    (Process.wait() also waits for the pipes)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    try:
        fd = os.pidfd_open(proc.pid)
    except OSError:  # already gone, or no pidfd: the pipes closing is the next best sign
        waiting = asyncio.ensure_future(proc.wait())
        waiting.add_done_callback(lambda _: done.done() or done.set_result(None))
        done.add_done_callback(lambda _: waiting.cancel())
        return done

    def on_exit() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(fd, on_exit)

    def close(_: asyncio.Future[None]) -> None:
        loop.remove_reader(fd)
        os.close(fd)

    done.add_done_callback(close)
    return done


async def _wait(waiting: asyncio.Future[None], deadline: float, stop: Callable[[], bool] | None,
                bound: asyncio.Future[str] | None) -> str | None:
    """None when the process ended by itself; else why it has to be killed ("timeout", "stopped", or
    the bound it passed)."""
    futures: set[asyncio.Future[Any]] = {waiting} if bound is None else {waiting, bound}
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout"
        done, _ = await asyncio.wait(futures, timeout=min(left, STOP_CHECK_SECONDS) if stop else left,
                                     return_when=asyncio.FIRST_COMPLETED)
        if waiting in done:
            return None
        if bound is not None and bound in done:
            if bound.exception() is None:
                return bound.result()
            log.error("the command's bounds could not be watched: %r", bound.exception())
            futures.discard(bound)  # the command goes on within its other bounds
        if stop is not None and stop():
            return "stopped"


async def _read(stream: asyncio.StreamReader | None, name: str, capture: OutputCapture) -> None:
    if stream is None:
        return
    while chunk := await stream.read(READ_CHUNK):
        capture.add(name, chunk)


def _kill_group(pid: int, cgroup: CommandCgroup | None) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    if cgroup is not None:
        cgroup.kill_all()


async def _end(proc: asyncio.subprocess.Process, cgroup: CommandCgroup | None, readers: list[asyncio.Task[None]]) -> None:
    """Kill the whole group and wait for it, even when the caller is being cancelled."""
    _kill_group(proc.pid, cgroup)
    with contextlib.suppress(TimeoutError, asyncio.CancelledError):
        await asyncio.shield(asyncio.wait_for(proc.wait(), REAP_SECONDS))
    await _drain(readers)
    for _ in range(100):  # the exit status arrives through the child watcher, a moment after the exit
        if proc.returncode is not None:
            return
        await asyncio.sleep(0.01)


async def _drain(readers: list[asyncio.Task[None]]) -> None:
    done, pending = await asyncio.wait(readers, timeout=DRAIN_SECONDS)
    for task in pending:
        task.cancel()
    for task in done:
        task.exception()  # a read error only means the output ended early
