"""The one way a thread's events go from the inbox to the thread's work, on both stores.

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
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol

from ..base.event import ThreadEvent
from ..base.lease import Lease, LeaseLost
from ..base.thread import ThreadKey
from ..inbox.file_inbox import FileInbox
from .lanes import ThreadLanes

log = logging.getLogger(__name__)

RunEvent = Callable[[ThreadEvent], Awaitable[None]]
Hold = Callable[[ThreadKey], AbstractAsyncContextManager[Lease | None]]


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
