"""Worker processes: several copies of the single-process bot, each answering for a shard of the threads.

A model turn costs a few milliseconds of CPU in the bot (the SDK's request handling, state files,
Block Kit), and one interpreter runs one of those at a time. With `workers: N` the front door
(front.py) routes each Slack request to the process owning its thread (shards.py), so N cores
share the turns. Every worker is the ordinary bot serving HTTP mode on a private Unix socket, and
accepts only requests the front door signed with a per-start secret. A worker that dies is started
again; it owns the same threads, so it resumes their interrupted runs like a restarted bot does.
"""

from __future__ import annotations

import asyncio
import logging
import math
import multiprocessing as mp
import os
import secrets
import shutil
import signal
import tempfile
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess

from pydantic import SecretStr

from core.llm import LLMSettings

from .config import BotConfig

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0  # seconds a worker gets to load packages and open its socket
MAX_BACKOFF = 30.0  # seconds between restarts of a worker that keeps dying


class WorkerFailed(RuntimeError):
    """A worker process could not start."""


@dataclass(frozen=True)
class WorkerSpec:
    config: BotConfig  # as this worker runs it: HTTP on `socket_path`, the internal secret, its share of limits
    llm_settings: LLMSettings | None
    index: int
    count: int
    socket_path: str


def worker_config(config: BotConfig, count: int, secret: str) -> BotConfig:
    """The config one of `count` workers runs with: the front door's secret, a share of the global limits."""
    limits = config.limits.model_copy(
        update={
            "max_concurrent_runs": math.ceil(config.limits.max_concurrent_runs / count),
            "status_edits_per_second": config.limits.status_edits_per_second / count,
        }
    )
    slack = config.slack.model_copy(update={"app_token": None, "signing_secret": SecretStr(secret)})
    return config.model_copy(update={"limits": limits, "slack": slack, "workers": 1})


def _worker_main(spec: WorkerSpec, ready: Connection) -> None:
    from .logging import setup_logging

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group; the front door decides
    setup_logging(spec.config.log_level, fields={"worker": spec.index})
    asyncio.run(_serve_worker(spec, ready))


async def _serve_worker(spec: WorkerSpec, ready: Connection) -> None:
    from .app import build, freeze_startup_heap
    from .shards import owned_by

    bot = build(spec.config, llm_settings=spec.llm_settings, owns=owned_by(spec.index, spec.count))
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    try:
        await bot.start_unix(spec.socket_path)
        freeze_startup_heap()
        ready.send(os.getpid())
        ready.close()
        await stop.wait()
    finally:
        await bot.close()


class WorkerPool:
    def __init__(self, config: BotConfig, *, llm_settings: LLMSettings | None = None) -> None:
        self.count = config.workers
        self.secret = secrets.token_hex(32)
        self._config = worker_config(config, self.count, self.secret)
        self._llm_settings = llm_settings
        self._grace = config.limits.shutdown_grace
        self._dir = tempfile.mkdtemp(prefix="crewagent-workers-")  # mode 0700: only this user reaches the sockets
        self._processes: list[BaseProcess | None] = [None] * self.count
        self._serving = [False] * self.count
        self._generation = [0] * self.count  # bumped each time a worker (re)starts serving
        self._changed = asyncio.Condition()
        self._watchers: list[asyncio.Task[None]] = []
        self._closing = False
        self.restarts = 0

    def socket_path(self, index: int) -> str:
        return os.path.join(self._dir, f"worker-{index}.sock")

    def pids(self) -> list[int | None]:
        return [p.pid if p is not None and p.is_alive() else None for p in self._processes]

    async def start(self) -> None:
        """Start every worker and wait until all of them serve; WorkerFailed if one cannot."""
        try:
            await asyncio.gather(*(self._spawn(i) for i in range(self.count)))
        except BaseException:
            await self.close()
            raise
        self._watchers = [asyncio.create_task(self._watch(i), name=f"worker-watch-{i}") for i in range(self.count)]

    def generation(self, index: int) -> int:
        return self._generation[index]

    async def ready(self, index: int, timeout: float, *, newer_than: int = -1) -> bool:
        """True once worker `index` serves (and has started since generation `newer_than`), within `timeout` s."""

        def serving() -> bool:
            return self._serving[index] and self._generation[index] > newer_than

        try:
            async with asyncio.timeout(timeout):
                async with self._changed:
                    await self._changed.wait_for(serving)
        except TimeoutError:
            return False
        return True

    async def _set_serving(self, index: int, serving: bool) -> None:
        async with self._changed:
            self._serving[index] = serving
            if serving:
                self._generation[index] += 1
            self._changed.notify_all()

    async def _spawn(self, index: int) -> None:
        ctx = mp.get_context("spawn")  # a clean interpreter: no inherited event loops, threads or sockets
        receiver, sender = ctx.Pipe(duplex=False)
        path = self.socket_path(index)
        if os.path.exists(path):
            os.unlink(path)
        spec = WorkerSpec(self._config, self._llm_settings, index, self.count, path)
        process = ctx.Process(target=_worker_main, args=(spec, sender), name=f"crewagent-worker-{index}")
        process.start()
        sender.close()
        self._processes[index] = process
        started = await asyncio.to_thread(_wait_ready, receiver, process, START_TIMEOUT)
        receiver.close()
        if not started:
            if process.is_alive():
                process.kill()
            await asyncio.to_thread(process.join)
            raise WorkerFailed(
                f"worker {index} did not start (exit code {process.exitcode}); its log lines above say why"
            )
        await self._set_serving(index, True)
        log.info("worker serving", extra={"worker": index, "pid": process.pid})

    async def _watch(self, index: int) -> None:
        """Start a worker again when it dies, backing off while it keeps failing."""
        delay = 0.5
        while not self._closing:
            process = self._processes[index]
            if process is not None:
                await _exited(process)
            if self._closing:
                return
            await self._set_serving(index, False)
            log.error(
                "worker exited; starting it again",
                extra={"worker": index, "exit_code": process.exitcode if process else None},
            )
            await asyncio.sleep(delay)
            try:
                await self._spawn(index)
                self.restarts += 1
                delay = 0.5
            except WorkerFailed as exc:
                log.error(str(exc), extra={"worker": index})
                delay = min(delay * 2, MAX_BACKOFF)

    async def close(self) -> None:
        """SIGTERM every worker (each finishes in-flight turns within the grace period), then clean up."""
        self._closing = True
        for task in self._watchers:
            task.cancel()
        await asyncio.gather(*self._watchers, return_exceptions=True)
        running = [p for p in self._processes if p is not None and p.is_alive()]
        for process in running:
            process.terminate()
        await asyncio.gather(*(asyncio.to_thread(_join_or_kill, p, self._grace + 10) for p in running))
        shutil.rmtree(self._dir, ignore_errors=True)


def _wait_ready(receiver: Connection, process: BaseProcess, timeout: float) -> bool:
    """Blocking (run in a thread): True when the worker reports it serves, False if it exits first."""
    for source in wait([receiver, process.sentinel], timeout):
        if source is receiver:
            try:
                receiver.recv()
            except EOFError:
                return False
            return True
    return False


async def _exited(process: BaseProcess) -> None:
    """Wait without a thread: a process's sentinel fd turns readable when it ends."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.add_reader(process.sentinel, lambda: done.done() or done.set_result(None))
    try:
        await done
    finally:
        loop.remove_reader(process.sentinel)
    await asyncio.to_thread(process.join)


def _join_or_kill(process: BaseProcess, timeout: float) -> None:
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
