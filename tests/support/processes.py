"""Helpers for tests that run `crewagent serve` as real processes: ports, health, and ending them.

Every process is started in its own session (process group) and ended with the whole group, so a
failing test leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from typing import Any

import aiohttp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kill_group(pid: int | None, sig: int = signal.SIGKILL) -> None:
    """Signal the process group led by `pid` (started with start_new_session=True); gone is fine."""
    if pid is None:
        return
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def wait_healthy(http: aiohttp.ClientSession, url: str, *, timeout: float) -> dict[str, Any]:
    """GET `url` until it answers 200 (the process is up and ready)."""
    deadline = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < deadline:
        try:
            async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as response:
                if response.status == 200:
                    body: dict[str, Any] = await response.json()
                    return body
                last = response.status
        except (aiohttp.ClientError, TimeoutError) as exc:
            last = exc
        await asyncio.sleep(0.1)  # polling a process we cannot be called back from
    raise AssertionError(f"{url} never became healthy: {last!r}")


REAP_TIMEOUT = 30.0  # seconds to wait for a killed group's leader to be reaped


class Spawner:
    """Starts processes for one test (the `spawn` fixture); `close` ends each one's whole group."""

    def __init__(self) -> None:
        self.processes: list[asyncio.subprocess.Process] = []

    async def __call__(self, *argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
        process = await asyncio.create_subprocess_exec(*argv, start_new_session=True, **kwargs)
        self.processes.append(process)
        return process

    async def close(self) -> None:
        for process in self.processes:
            kill_group(process.pid)
            try:
                await asyncio.wait_for(process.wait(), REAP_TIMEOUT)
            except TimeoutError:
                pass
