"""Thread work across replicas: every event is queued in the Postgres inbox (bot.inbox), and the replica
holding the thread's lease takes the thread's events out in order and runs them, one at a time, in its
local lane: the thread worker (bot.threads.thread_worker) drains, and this is its queue and its hold.
While the database is away, events wait in a local away-inbox (the same table on SQLite) and are
forwarded when it is back: an insert that ignores a delivery already there, so a forward repeated
after a crash queues nothing twice.

The replica that received an event queues it and tries the lease itself. If another live replica
holds it, that one finds the event in its drain loop, or right after it released the lease (it looks
once more then), so an event is never stranded. A replica taking a thread over brings the run's
folder up to date from Postgres and resumes a run left `running` by a replica that died.

Taking the lease gives an epoch (bot.base.lease); the thread's work runs under it, so each of
its writes lands only while no one has taken the thread since. A refused write (LeaseLost) ends
the drain quietly: the thread is someone else's now.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import psycopg
from crewagent.core.api.events import RunPhase
from crewagent.core.api.runs import RunRecord
from crewagent.core.api.stores import WRITE_FENCE, Fence

from ..base.event import ThreadEvent
from ..base.thread import ThreadKey
from .callbacks import HandoverCallbacks, Lanes
from ..base.lease import HELD, Lease, LeaseLost, mark_lost, still_held
from ..inbox.database_inbox import DatabaseInbox
from ..inbox.file_inbox import FileInbox
from .membership import waits_for_database
from .tables import FENCE_SQL

if TYPE_CHECKING:
    from crewagent.core.api.stores import PostgresRuntimeStore

    from .membership import Replicas

log = logging.getLogger(__name__)

COUNT_TIMEOUT = 2.0  # seconds a metrics scrape may wait for the shared inbox's depth
PRUNE_EVERY = 60.0  # seconds between two prunes of inbox rows whose redelivery window has passed
WAIT_NOTE_SECONDS = 10.0  # an event kept locally this long gets one line in its thread
WAIT_NOTE = ":hourglass: I can't reach my database right now. I have your message and will take it as soon as I can."
Say = Callable[[ThreadKey, str], Awaitable[None]]
# Set where a Slack call must go out while the database is away (the line saying an event waits for it).
NOT_HELD: ContextVar[bool] = ContextVar("slack_call_not_held", default=False)


class Handover:
    def __init__(
        self,
        replicas: Replicas,
        runtime: PostgresRuntimeStore,
        lanes: Lanes,
        *,
        inbox: DatabaseInbox,
        away: FileInbox | None = None,
        say: Say | None = None,
    ) -> None:
        self.replicas = replicas
        self.runtime = runtime
        self.lanes = lanes
        self.inbox = inbox
        self.away = away  # events taken while the database was away
        # Taking a thread's events waits while the database is away (the drain pauses there).
        self.next_for = waits_for_database(inbox.next_for)
        self.done = waits_for_database(inbox.done)
        self.has_waiting = waits_for_database(inbox.has_waiting)
        self._pruned = time.monotonic()
        self.say = say  # one line into a thread (not through the outbox: its store may be the one away)
        self.work: HandoverCallbacks | None = None  # see connect
        self._driving: dict[ThreadKey, Lease] = {}  # threads this replica holds and drains now, by lease
        self._noted: set[ThreadKey] = set()  # threads told their event waits for the database
        self._adopt_after = 0.0  # after an outage of our own, others get two lease times to beat first
        self._replaying = asyncio.Lock()
        self._side: set[asyncio.Task[None]] = set()
        # One rebuild of a thread's run folder at a time (a lock lives while someone holds or awaits it).
        self._copying: weakref.WeakValueDictionary[ThreadKey, asyncio.Lock] = weakref.WeakValueDictionary()

    def connect(self, work: HandoverCallbacks) -> None:
        """The thread work that runs the events this replica takes out of the queue."""
        self.work = work

    async def start(self) -> int:
        """Join the replicas; returns how many threads this replica took over at once."""
        await self.replicas.start(
            on_inbox=self._on_inbox, on_control=self._on_control, on_tick=self._tick, on_lost=self._on_lost,
            on_back=self._on_back,
        )
        await self.forward()  # what an earlier process here kept while its database was away
        return await self.adopt_orphans()

    async def stop(self) -> None:
        for task in self._side:
            task.cancel()
        await asyncio.gather(*self._side, return_exceptions=True)
        await asyncio.to_thread(self.runtime.flush)
        await self.replicas.stop()
        if self.away is not None:
            await self.away.close()  # what waits in it stays for the next start

    async def waiting_in_database(self) -> tuple[int, float | None] | None:
        """How many events wait in the shared inbox, and when the oldest was queued; None while the database
        does not answer in time (a scrape must not wait for it)."""
        try:
            return await asyncio.wait_for(self.inbox.waiting_summary(), COUNT_TIMEOUT)
        except (TimeoutError, psycopg.Error):
            return None

    # ---- queueing -----------------------------------------------------------------

    async def push(self, event: ThreadEvent, control: ThreadEvent | None = None) -> bool:
        """Queue `event` for its thread (and signal `control` to the replica pumping its run); True when
        the thread's holder can take it now. A delivery the inbox has already is acknowledged and nothing
        more. While the database is away, keep it in the away-inbox (in order behind what waits there
        already; `forward` queues it later); raises when it cannot be kept anywhere, so Slack gets no
        ack and delivers it again."""
        control = _small(control) if control is not None else None
        if self.away is None or not self.away.waiting_count:
            try:
                return await self.inbox.push(event, control)
            except psycopg.OperationalError:  # stopped, unreachable, no free connection in time
                if self.away is None:
                    raise
        if await self.away.add(event, control) is not None:
            self._note_wait(event.key)
        return False

    def _note_wait(self, key: ThreadKey) -> None:
        if key in self._noted or self.say is None:
            return
        self._noted.add(key)
        task = asyncio.create_task(self._say_waiting(key), name=f"db-wait-note:{key}")
        self._side.add(task)
        task.add_done_callback(self._side.discard)

    async def _say_waiting(self, key: ThreadKey) -> None:
        await asyncio.sleep(WAIT_NOTE_SECONDS)  # a deadline: only a wait this long is worth a line
        if key in self._noted and self.say is not None:
            await self.say(key, WAIT_NOTE)

    async def forward(self) -> None:
        """Queue the away-inbox's events in Postgres, oldest first (stops at the first that does not go).
        One forwarded before a crash, but not yet marked done here, is found in the inbox: not queued twice."""
        if self.away is None:
            return
        async with self._replaying:
            for seq, event, control in await self.away.waiting():
                try:
                    await self.inbox.push(event, control)
                except psycopg.OperationalError:
                    return  # still away: the next heartbeat that gets through tries again
                await self.away.done(None, seq)
                self._noted.discard(event.key)
                self.kick(event.key)
            self._noted.clear()

    def kick(self, key: ThreadKey) -> None:
        """Try to drive the thread: its worker's drain takes the lease (`hold`)."""
        if self.work is not None:
            self.work.kick(key)

    async def _tick(self) -> None:
        """After each heartbeat: forward what the away-inbox kept, take over orphaned threads, and now and
        then forget handled events whose redelivery window has passed."""
        if self.away is not None and self.away.waiting_count:
            await self.forward()
        await self.adopt_orphans()
        if time.monotonic() - self._pruned > PRUNE_EVERY:
            self._pruned = time.monotonic()
            await self.inbox.prune()

    def _may_adopt(self) -> bool:
        """Whether a holder whose heartbeat is old counts as dead: not until a while after an outage of
        our own (the others' heartbeats may just not have come through yet)."""
        return time.monotonic() >= self._adopt_after

    async def adopt_orphans(self) -> int:
        """Threads whose driver died (or that never had one): try to take each over."""
        if not self._may_adopt():
            return 0
        await self.replicas.forget_dead()
        keys = [k for k in map(ThreadKey.parse, await self.replicas.orphans()) if k is not None]
        for key in keys:
            self.kick(key)
        return len(keys)

    # ---- driving one thread ---------------------------------------------------------

    @asynccontextmanager
    async def hold(self, key: ThreadKey) -> AsyncIterator[Lease | None]:
        """The thread's lease while its worker drains it (None: another replica drives it, and finds the
        event, or it is adopted once that one is dead). Every write of the thread's work inside names the
        lease's epoch; a refused one (LeaseLost) ends the drain quietly, its event left to the new holder."""
        lease, previous = await self.replicas.acquire(key, from_dead=self._may_adopt)
        if lease is None:
            yield None
            return
        self._driving[key] = lease
        held = HELD.set(lease)  # every write of the thread's work from here on names this epoch
        fenced = WRITE_FENCE.set(Fence(FENCE_SQL.format(key="%s", epoch="%s"), lease))  # the run's copy too
        try:
            yield await self._taken(key, lease, current=previous == self.replicas.id)
        except LeaseLost:
            _leave(lease)
        finally:
            HELD.reset(held)
            WRITE_FENCE.reset(fenced)
            self._driving.pop(key, None)
            if self.runtime.pending():  # the next driver must find every write of ours
                await asyncio.shield(asyncio.to_thread(self.runtime.flush))
            await asyncio.shield(self.replicas.release(key))

    async def _taken(self, key: ThreadKey, lease: Lease, *, current: bool) -> Lease | None:
        """The lease, once the thread is taken over (`_take_over`); None when a newer holder refused that."""
        try:
            await self._take_over(key, current=current)
        except LeaseLost:
            _leave(lease)
            return None
        return lease

    async def _take_over(self, key: ThreadKey, *, current: bool) -> None:
        work = self.work
        if work is None:
            return
        if not current and work.take_outbox is not None:
            await work.take_outbox(key)  # the previous holder's open stream is settled before any redo here
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

    async def hold_while_cut_off(self) -> None:
        """Awaited before every Slack call: while this replica is cut off from its database, what its runs
        show (streamed words, status lines, edits) waits here. A run another replica took over meanwhile
        is cancelled while it waits (`_recover`), so it shows nothing more in that thread."""
        if NOT_HELD.get():
            return
        while self.replicas.cut_off:
            await asyncio.sleep(self.replicas.beat_interval)  # the heartbeat thread decides: nothing to wait on
        lease = HELD.get()
        if not still_held(lease):
            assert lease is not None
            raise LeaseLost(lease.thread)  # the thread passed on while this call waited: it is not made

    def _on_lost(self) -> None:
        """No heartbeat for a whole lease time: another replica may take our threads over from now on.
        Our runs are paused where they are (nothing they say is shown); what they write for a thread
        someone took over is refused by its epoch (tables.FENCE_SQL)."""
        self.replicas.taking_stock = True
        self._adopt_after = math.inf  # until we are back (`_recover`)

    def _on_back(self) -> None:
        task = asyncio.create_task(self._recover(), name="db-back")
        self._side.add(task)
        task.add_done_callback(self._recovered)

    def _recovered(self, task: asyncio.Task[None]) -> None:
        self._side.discard(task)
        if not task.cancelled() and task.exception() is not None:  # the database went away again meanwhile
            log.warning("could not take stock after the database came back; trying again", exc_info=task.exception())
            asyncio.get_running_loop().call_later(self.replicas.beat_interval, self._on_back)

    async def _recover(self) -> None:
        """The database is back: stop our work in threads another replica took meanwhile (its writes
        there are refused anyway), hand back leases of threads we no longer drive, forward what the
        away-inbox kept."""
        if self.replicas.taking_stock:
            # Every replica's heartbeat stopped with ours: give the others two lease times to beat again.
            self._adopt_after = time.monotonic() + 2 * self.replicas.lease_seconds
            driving = [str(key) for key in self._driving]
            taken = await self.replicas.taken_from_me(driving)
            for thread in taken:
                key = ThreadKey.parse(thread)
                if key is not None and (lease := self._driving.get(key)) is not None:
                    mark_lost(lease)  # before anything held during the outage may go out
                lane = self.lanes.lane(key) if key is not None else None
                if lane is not None and lane.task is not None:
                    log.warning("another replica took this thread over while we were cut off; leaving it",
                                extra={"slack_thread": thread})
                    lane.task.cancel()
            await self.replicas.release_all_but([k for k in driving if k not in taken])
            self.replicas.taking_stock = False
        await self.forward()


def _leave(lease: Lease) -> None:
    """Another replica took the thread over: what is still waiting to be shown under `lease` is dropped too."""
    mark_lost(lease)
    log.warning("another replica took this thread over; leaving it", extra={"slack_thread": lease.thread})


def _small(control: ThreadEvent) -> ThreadEvent:
    """The control as every replica is told it: a NOTIFY payload is limited to 8000 bytes, so a text
    keeps its command alone (or nothing, for a reply the pumping run's thread is told waits) and a click
    leaves out the message it sat on."""
    if control.kind == "text":
        return control.model_copy(update={"text": f"*{control.command}" if control.command else ""})
    return control.model_copy(update={"clicked": None})
