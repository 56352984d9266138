"""Thread work across replicas: every event is queued in Postgres, and the replica holding the thread's
lease takes the thread's events out in order and runs them, one at a time, in its local lane.

The replica that received an event queues it and tries the lease itself. If another live replica
holds it, that one finds the event in its drain loop, or right after it released the lease (it looks
once more then), so an event is never stranded. A replica taking a thread over brings the run's
folder up to date from Postgres and resumes a run left `running` by a replica that died.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import TYPE_CHECKING, Any

from core.api.events import RunPhase
from core.api.runs import RunRecord

from ..base.event import ThreadEvent
from ..base.thread import ThreadKey
from .callbacks import HandoverCallbacks, Lanes

if TYPE_CHECKING:  # only a bot with a database builds a Handover; psycopg stays unloaded otherwise
    from core.api.stores import PostgresRuntimeStore

    from .membership import Replicas

log = logging.getLogger(__name__)


class Handover:
    def __init__(self, replicas: Replicas, runtime: PostgresRuntimeStore, lanes: Lanes) -> None:
        self.replicas = replicas
        self.runtime = runtime
        self.lanes = lanes
        self.work: HandoverCallbacks | None = None  # see connect
        self._scheduled: set[ThreadKey] = set()
        # One rebuild of a thread's run folder at a time (a lock lives while someone holds or awaits it).
        self._copying: weakref.WeakValueDictionary[ThreadKey, asyncio.Lock] = weakref.WeakValueDictionary()

    def connect(self, work: HandoverCallbacks) -> None:
        """The thread work that runs the events this replica takes out of the queue."""
        self.work = work

    async def start(self) -> int:
        """Join the replicas; returns how many threads this replica took over at once."""
        await self.replicas.start(
            on_inbox=self._on_inbox, on_control=self._on_control, on_tick=self.adopt_orphans, on_lost=self._on_lost
        )
        return await self.adopt_orphans()

    async def stop(self) -> None:
        await asyncio.to_thread(self.runtime.flush)
        await self.replicas.stop()

    # ---- queueing -----------------------------------------------------------------

    async def push(self, event: ThreadEvent, control: ThreadEvent | None = None) -> None:
        """Queue `event` for its thread (and signal `control` to the replica pumping its run)."""
        await self.replicas.push(event, control)
        self.kick(event.key)

    def kick(self, key: ThreadKey) -> None:
        """Try to drive the thread (at most one attempt queued per thread)."""
        if key in self._scheduled:
            return
        self._scheduled.add(key)
        if not self.lanes.submit(key, lambda: self._drain(key)):
            self._scheduled.discard(key)

    async def adopt_orphans(self) -> int:
        """Threads whose driver died (or that never had one): try to take each over."""
        await self.replicas.forget_dead()
        keys = [k for k in map(ThreadKey.parse, await self.replicas.orphans()) if k is not None]
        for key in keys:
            self.kick(key)
        return len(keys)

    # ---- driving one thread ---------------------------------------------------------

    async def _drain(self, key: ThreadKey) -> None:
        self._scheduled.discard(key)
        taken, previous = await self.replicas.acquire(key)
        if not taken:
            return  # a live replica drives it and will find the event
        try:
            await self._take_over(key, current=previous == self.replicas.id)
            while (item := await self.replicas.next_event(key)) is not None:
                seq, event = item
                if event is not None and self.work is not None:
                    try:
                        await self.work.run_event(event)
                    except Exception:  # one broken event must not block the thread's queue for good
                        log.exception("thread event failed", extra={"slack_thread": str(key)})
                await self.replicas.done(seq)
        finally:
            try:
                if self.runtime.pending():  # the next driver must find every write of ours
                    await asyncio.shield(asyncio.to_thread(self.runtime.flush))
                await asyncio.shield(self.replicas.release(key))
            except Exception:
                log.warning("could not release a thread lease", extra={"slack_thread": str(key)}, exc_info=True)
        if await self.replicas.queued(key):
            self.kick(key)  # queued by another replica while we were letting go

    async def _take_over(self, key: ThreadKey, *, current: bool) -> None:
        work = self.work
        if work is None:
            return
        run_id = await work.idle_run(key)
        if not run_id:
            return
        run = await asyncio.to_thread(self.runtime.read_record, run_id)
        if run is None:
            return
        if not current:
            await self._rebuild(key, run)
        if run.phase == RunPhase.RUNNING:
            await work.resume_thread(key, run_id)

    async def refresh(self, key: ThreadKey, run: RunRecord) -> None:
        """Bring a run's local folder up to date for reading (an upload, a status) unless this replica
        drives the thread, whose local copy is the newest there is."""
        if self.lanes.lane(key) is None:
            await self._rebuild(key, run)

    async def _rebuild(self, key: ThreadKey, run: RunRecord) -> None:
        lock = self._copying.get(key)
        if lock is None:
            lock = self._copying[key] = asyncio.Lock()
        async with lock:
            await asyncio.to_thread(self.runtime.materialise, run)

    # ---- signals --------------------------------------------------------------------

    def _on_inbox(self, thread: str) -> None:
        key = ThreadKey.parse(thread)
        if key is not None and self.lanes.lane(key) is not None:
            self.kick(key)  # we drive it now: make sure the event is looked at after the current job

    def _on_control(self, payload: dict[str, Any]) -> None:
        if self.work is None:
            return
        try:
            event = ThreadEvent.model_validate(payload)
        except ValueError:
            return
        self.work.control_signal(event)

    def _on_lost(self) -> None:
        """Our heartbeat failed for a whole lease time: another replica may resume our runs now."""
        if self.work is not None:
            log.error("lost contact with Postgres for a whole lease time; stopping local runs")
            self.work.stop_local_runs()
