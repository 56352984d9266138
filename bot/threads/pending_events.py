"""Embedded mode (no database): a thread event queued on its lane is kept in the local inbox
(`<home>/slack/inbox.sqlite`, bot.inbox.file_inbox) from before Slack gets its ack until the lane has
run it, so a kill -9 while it waits behind a pumping run loses nothing. A redelivery of an event the
inbox has (waiting, or handled within the redelivery window) is acknowledged and not queued again. At
start-up, after interrupted runs are resumed, what still waits goes to its thread's lane again, oldest first.

A replay may meet an event that a previous process had already decided (it died between the
decision and forgetting the event). Every event that goes through here carries dedupe keys,
claimed durably when it is decided (bot.threads.event_claim), so that event is skipped, not handled twice.
Typed text the agent answers with a reply is claimed only once that reply is recorded whole (or a run
took the text, bot.threads.event_claim): an event whose reply a kill -9 cut off is handled again.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from functools import partial

from ..base.event import ThreadEvent
from ..inbox.file_inbox import FileInbox
from .lanes import ThreadLanes

log = logging.getLogger(__name__)

RunEvent = Callable[[ThreadEvent], Awaitable[None]]
Signal = Callable[[ThreadEvent], None]


class PendingEvents:
    """Queues thread events on their lanes, kept in `inbox` until run (in memory only without one). The
    embedded counterpart of the replicas' `Handover.push`: the same call, so intake has one way in."""

    def __init__(self, *, lanes: ThreadLanes, run: RunEvent, inbox: FileInbox | None) -> None:
        self.lanes = lanes
        self.run = run
        self.inbox = inbox
        self.signal: Signal | None = None  # see connect

    def connect(self, signal: Signal) -> None:
        """Where a control goes at once (a pause/stop for the run pumping in the thread), as the replicas'
        NOTIFY takes it to every replica."""
        self.signal = signal

    async def push(self, event: ThreadEvent, control: ThreadEvent | None = None) -> None:
        """Keep `event`, then queue it behind the thread's earlier work, and give `control` to the run
        pumping in the thread now; a delivery the inbox has already does neither. Raises when it cannot
        be kept: then Slack gets no ack and delivers it again."""
        if self.inbox is None:
            self.lanes.submit(event.key, partial(self.run, event))
            self._signal(control)
            return
        # The lane place is taken now, in arrival order (a later event's write may finish first); the job
        # waits until the event is kept. Not accepted while shutting down: kept, the next start runs it.
        kept: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self.lanes.submit(event.key, partial(self._run_when_kept, kept, event))
        seq: int | None = None
        try:
            seq = await self.inbox.add(event)
        finally:
            kept.set_result(seq)  # None: a redelivery (acknowledged), or not kept (the error goes on: no ack)
        if seq is not None:
            self._signal(control)

    def _signal(self, control: ThreadEvent | None) -> None:
        if control is not None and self.signal is not None:
            self.signal(control)

    async def replay(self) -> list[ThreadEvent]:
        """Queue what a previous process kept but did not finish, oldest first. Returns those events."""
        if self.inbox is None:
            return []
        kept = await self.inbox.waiting()
        for seq, event, _ in kept:
            self.lanes.submit(event.key, partial(self._run_kept, seq, event))
        return [event for _, event, _ in kept]

    async def close(self) -> None:
        """At shutdown, once the lanes are closed: what is still kept waits for the next start."""
        if self.inbox is not None:
            await self.inbox.close()

    async def _run_when_kept(self, kept: asyncio.Future[int | None], event: ThreadEvent) -> None:
        seq = await kept
        if seq is not None:
            await self._run_kept(seq, event)

    async def _run_kept(self, seq: int, event: ThreadEvent) -> None:
        """Run the event, then mark it done, also when it failed (the lane logs that): a failing event
        replayed at every start would fail again. A cancelled one (shutdown) stays for the next start."""
        try:
            await self.run(event)
        finally:
            task = asyncio.current_task()
            if task is None or not task.cancelling():
                await self._forget(seq)

    async def _forget(self, seq: int) -> None:
        assert self.inbox is not None
        try:
            await self.inbox.done(seq)
        except (OSError, sqlite3.Error, TimeoutError) as exc:
            # Harmless: the next start replays it, and its claimed dedupe keys make that replay a no-op.
            log.warning(
                "a handled thread event is still kept as pending",
                extra={"path": str(self.inbox.path), "error": str(exc)},
            )
