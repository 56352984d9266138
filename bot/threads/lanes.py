"""Per-thread ordering: work for one Slack thread runs strictly in arrival order, threads run in parallel.

Each busy thread has a lane (a FIFO of jobs and one worker task); an idle thread has no lane
at all, so thousands of quiet threads cost nothing. Urgent work (pause/stop) bypasses the
lane through `spawn`, which is still tracked so shutdown can wait for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from ..base.thread import ThreadKey, ThreadRecord

log = logging.getLogger(__name__)

Job = Callable[[], Awaitable[None]]


class ThreadLane:
    def __init__(self, key: ThreadKey) -> None:
        self.key = key
        self.jobs: deque[Job] = deque()
        self.task: asyncio.Task[None] | None = None
        self.live: ThreadRecord | None = None  # the record the running job is working on


class ThreadLanes:
    def __init__(self) -> None:
        self._lanes: dict[ThreadKey, ThreadLane] = {}
        self._side_tasks: set[asyncio.Task[Any]] = set()
        self.accepting = True

    def __len__(self) -> int:
        return len(self._lanes)

    def lane(self, key: ThreadKey) -> ThreadLane | None:
        return self._lanes.get(key)

    def submit(self, key: ThreadKey, job: Job) -> bool:
        """Queue `job` behind earlier work of the same thread; False once shutting down."""
        if not self.accepting:
            return False
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = ThreadLane(key)
        lane.jobs.append(job)
        if lane.task is None:
            lane.task = asyncio.create_task(self._drain(lane), name=f"lane:{key}")
        return True

    def spawn(self, coro: Coroutine[Any, Any, None], name: str = "side") -> bool:
        """Run `coro` now, outside any lane (for work that must not wait behind a pumping run)."""
        if not self.accepting:
            coro.close()
            return False
        task = asyncio.create_task(_logged(lambda: coro, "side task failed", {"task": name}), name=name)
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)
        return True

    async def _drain(self, lane: ThreadLane) -> None:
        try:
            while lane.jobs:
                job = lane.jobs.popleft()
                try:
                    await _logged(job, "thread job failed", {"slack_thread": str(lane.key)})
                finally:
                    lane.live = None
        finally:
            lane.task = None
            # No await between the emptiness check and the removal: a concurrent submit
            # either landed before (and was drained) or creates a fresh lane after.
            if self._lanes.get(lane.key) is lane:
                if lane.jobs and self.accepting:
                    lane.task = asyncio.create_task(self._drain(lane), name=f"lane:{lane.key}")
                else:
                    del self._lanes[lane.key]

    async def idle(self, timeout: float | None = None) -> bool:
        """Wait until no lane and no side task is busy; True if that happened within `timeout`."""
        try:
            async with asyncio.timeout(timeout):
                while self._lanes or self._side_tasks:
                    tasks = [lane.task for lane in self._lanes.values() if lane.task] + list(self._side_tasks)
                    if tasks:
                        await asyncio.wait(tasks)
                    else:
                        await asyncio.sleep(0)
        except TimeoutError:
            return False
        return True

    async def close(self, timeout: float) -> None:
        """Stop taking work, give in-flight jobs `timeout` seconds, then cancel what is left."""
        self.accepting = False
        if await self.idle(timeout):
            return
        pending = [lane.task for lane in self._lanes.values() if lane.task] + list(self._side_tasks)
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        self._lanes.clear()


async def _logged(work: Job, failure: str, context: dict[str, str]) -> None:
    """Where a side task's or a thread job's failure ends, logged once with its context: nothing waits for
    its result, and the lane goes on with the thread's next job."""
    try:
        await work()
    except Exception:  # cancellation is not an Exception: it still ends the lane
        log.exception(failure, extra=context)
