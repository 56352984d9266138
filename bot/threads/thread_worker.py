"""The one way a thread's events go from the inbox to the thread's work, on both stores, and the
per-thread order they run in.

`push` keeps an event (and hands the control a pumping run must get at once to whoever pumps it) before
Slack gets its ack; a delivery the inbox has already is acknowledged and nothing more. Then the thread
is kicked: one drain per thread at a time, on the thread's lane, holds the thread, takes its events out
in order, runs each and marks it done. The two stores differ only in what they are given:

- embedded: the local inbox (bot.inbox.file_inbox) as the queue, and a hold that always succeeds (one
  process owns every thread);
- replicas: the hand-over (bot.replicas.handover) as both: the Postgres inbox (or the away-inbox while
  the database is away) and the thread's lease, whose epoch every write of the drain carries.

An event whose work fails is marked done too (it would fail at every start); one cut short by a
shutdown, a crash or a lost lease stays waiting, and whoever holds the thread next runs it again,
where its claim (bot.threads.event_claim) keeps what was already decided from happening twice.

A lane is a busy thread's FIFO of jobs and its one task (a drain, or a run resumed at start); an idle
thread has no lane at all, so thousands of quiet threads cost nothing. Urgent work (pause/stop) goes
around the lanes through `spawn`, still tracked so that shutdown can wait for it.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

from ..base.event import ThreadEvent
from ..base.lease import Lease, LeaseLost
from ..base.thread import ThreadKey, ThreadRecord
from ..inbox.file_inbox import FileInbox

log = logging.getLogger(__name__)

RunEvent = Callable[[ThreadEvent], Awaitable[None]]
Job = Callable[[], Awaitable[None]]
Hold = Callable[[ThreadKey], AbstractAsyncContextManager[Lease | None]]


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


class EventQueue(Protocol):
    """Where a thread's events wait: bot.inbox.file_inbox.FileInbox, bot.replicas.handover.Handover."""

    async def push(self, event: ThreadEvent, control: ThreadEvent | None = None) -> bool: ...

    async def next_for(self, lease: Lease) -> tuple[int, ThreadEvent | None] | None: ...

    async def done(self, lease: Lease, seq: int) -> None: ...

    async def has_waiting(self, key: ThreadKey) -> bool: ...


@asynccontextmanager
async def held_here(key: ThreadKey) -> AsyncIterator[Lease]:
    """A single process holds every thread: no epoch to take or to check."""
    yield Lease(str(key), 0)


class ThreadWorker:
    def __init__(self, *, lanes: ThreadLanes, queue: EventQueue, run: RunEvent, hold: Hold = held_here) -> None:
        self.lanes = lanes
        self.queue = queue
        self.run = run
        self.hold = hold
        self._scheduled: set[ThreadKey] = set()

    async def push(self, event: ThreadEvent, control: ThreadEvent | None = None) -> None:
        """Keep `event` for its thread and give `control` to the run pumping in the thread now. Raises when
        it cannot be kept: then Slack gets no ack and delivers it again."""
        if await self.queue.push(event, control):
            self.kick(event.key)

    def kick(self, key: ThreadKey) -> None:
        """Drain the thread's events (at most one drain queued per thread)."""
        if key in self._scheduled:
            return
        self._scheduled.add(key)
        if not self.lanes.submit(key, lambda: self._drain(key)):
            self._scheduled.discard(key)  # shutting down: what waits stays kept for the next start

    async def replay(self) -> int:
        """Embedded, at start, behind the resumed runs: the events a previous process kept but did not
        finish, oldest first. Returns how many. (Replicas find them by taking threads over.)"""
        if not isinstance(self.queue, FileInbox):
            return 0
        for key in await self.queue.load():
            self.kick(key)
        return self.queue.waiting_count

    async def close(self) -> None:
        """At shutdown, once the lanes are closed: what is still kept waits for the next start. (The
        replicas' away-inbox is closed with the hand-over.)"""
        if isinstance(self.queue, FileInbox):
            await self.queue.close()

    async def _drain(self, key: ThreadKey) -> None:
        self._scheduled.discard(key)
        async with self.hold(key) as lease:
            if lease is None:
                return  # another replica holds the thread and drains it
            while (item := await self.queue.next_for(lease)) is not None:
                seq, event = item
                if event is not None:
                    await self._run(key, event)
                await self.queue.done(lease, seq)
        if await self.queue.has_waiting(key):
            self.kick(key)  # queued while the thread was being let go

    async def _run(self, key: ThreadKey, event: ThreadEvent) -> None:
        try:
            await self.run(event)
        except LeaseLost:
            raise
        except Exception:  # one broken event must not block the thread's queue for good
            log.exception("thread event failed", extra={"slack_thread": str(key)})


async def _logged(work: Job, failure: str, context: dict[str, str]) -> None:
    """Where a side task's or a thread job's failure ends, logged once with its context: nothing waits for
    its result, and the lane goes on with the thread's next job."""
    try:
        await work()
    except Exception:  # cancellation is not an Exception: it still ends the lane
        log.exception(failure, extra=context)
