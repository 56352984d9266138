"""Slack calls that can wait: one sender per rate budget, what people must read first, the rest coalesced.

Slack limits each method per workspace (chat.update is Tier 3: about 50 calls a minute with short
bursts; the assistant status line has a limit of its own), and every run in the workspace shares
that budget. Many events want to change one message or one status line, and only the newest state
matters, so callers `put` a key's newest state (a way to send it) with a priority:

- URGENT: what a person must read or act on (a reply's final text, Paused / Failed / Completed).
  Sent at once, before anything else, from a reserve of the burst that nothing else may spend.
- LIVE: a reply while it is being written, a routine phase change.
- BACKGROUND: plan redraws and status lines: at most one call per key per `interval`, oldest
  first, out of what the reserve leaves.

A state put as a milestone (a phase) is never replaced before it is sent: a newer state waits
behind it. Calls for different keys go out concurrently (up to `concurrency`), one at a time per
key, so a slow or retried call never holds back another thread. Nothing a run does waits for a call.
A state is sent under the thread lease it was put under, and dropped once that lease is lost. The
senders are made by the port (bot.slack_port), which makes the calls. Waiting states are filed by
what they wait for (`_Schedule`), so a wake looks only at those whose time has come, however many
threads are waiting.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import math
import time
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from enum import IntEnum

from .base.lease import HELD, Lease, still_held
from .waits import wait_set

log = logging.getLogger(__name__)

Send = Callable[[], Awaitable[bool]]  # makes the call; False when there was nothing to send after all
MAX_TRACKED = 2000  # keys remembered (last call time) for their interval; older idle ones are forgotten
MAX_KEPT = 8  # milestones waiting behind newer states, per key; beyond that the oldest go


class CallBudget:
    """A token bucket: `per_minute` calls on average, up to `burst` at once."""

    def __init__(self, per_minute: float, burst: int) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._tokens = float(burst)
        self._at = time.monotonic()

    def level(self) -> float:
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        return self._tokens

    def take(self) -> bool:
        """Spend one call if the budget has one now."""
        if self.level() >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def spend(self, calls: float = 1.0) -> None:
        """Spend (or, negative, give back) calls whether or not the budget has them: a call that cannot
        wait still counts, and what follows waits longer."""
        self._tokens = min(self.burst, self.level() - calls)

    def seconds_until(self, level: float) -> float:
        missing = level - self.level()
        if missing <= 0:
            return 0.0
        return missing / self.rate if self.rate > 0 else math.inf


class Priority(IntEnum):
    URGENT = 0
    LIVE = 1
    BACKGROUND = 2


@dataclass
class _Slot:
    key: Hashable
    send: Send | None = None  # the newest state not sent yet
    priority: Priority = Priority.BACKGROUND
    milestone: str | None = None
    not_before: float = 0.0  # a state asked for later (a refresh), not wanted now
    kept: list[tuple[Send, Priority]] = field(default_factory=list)  # milestones superseded before they were sent
    since: float = 0.0  # when it became dirty: oldest first within a priority
    last_sent: float = -math.inf
    busy: bool = False
    place: Place | None = None  # where the schedule holds it (None: nothing to send)
    order: tuple[float, float] = (0.0, 0.0)  # its order there
    version: int = 0  # bumped at each move: the schedule's older heap entries for the slot are stale

    @property
    def dirty(self) -> bool:
        return self.send is not None or bool(self.kept)

    @property
    def head_priority(self) -> Priority:
        return self.kept[0][1] if self.kept else self.priority


class Place(IntEnum):
    """Where a dirty slot waits. Only READY slots are weighed against each other."""

    LATER = 0  # a refresh asked for later (not_before): not wanted yet
    BUSY = 1  # wanted, but a call for the key is in flight
    COOLING = 2  # wanted, but its interval since the last call has not passed
    READY = 3  # wanted and may go now, budget permitting


_WANTED = (Place.BUSY, Place.COOLING, Place.READY)


class _Schedule:
    """The dirty slots ordered by what they wait for, so a wake costs O(log n) per slot that changed
    place instead of a scan of every waiting key (a few hundred threads redraw at once).

    Three heaps with lazy deletion: LATER by not_before, COOLING by when the interval ends, READY by
    (priority, oldest first). A slot is re-placed whenever its state changes (`place`); the entries it
    left behind carry an older version and are skipped, and a heap is rebuilt once stale entries
    outnumber the live ones.
    """

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._heaps: dict[Place, list[tuple[float, float, int, int, _Slot]]] = {
            Place.LATER: [], Place.COOLING: [], Place.READY: [],
        }
        self._counts = dict.fromkeys(Place, 0)
        self._order = itertools.count()  # ties: first placed, first out

    def place(self, slot: _Slot, now: float) -> None:
        """File the slot where its current state belongs (or nowhere, when it has nothing to send).

        Called at every put: written out in one function (no properties), as it runs for every redraw."""
        kept = slot.kept
        where: Place | None
        order = (0.0, 0.0)  # BUSY, or nothing to send: in no heap
        if slot.send is None and not kept:
            where = None
        elif not kept and slot.not_before > now:
            where, order = Place.LATER, (slot.not_before, 0.0)
        elif slot.busy:
            where = Place.BUSY
        else:
            priority = kept[0][1] if kept else slot.priority
            due = slot.last_sent + self.interval
            if priority is not Priority.URGENT and due > now:
                where, order = Place.COOLING, (due, 0.0)
            else:
                where, order = Place.READY, (float(priority), slot.since)
        if where is slot.place and order == slot.order:
            return  # a newer state of a thread redrawing inside its interval, say: its entry stands
        if slot.place is not None:
            self._counts[slot.place] -= 1
        slot.place, slot.order = where, order
        slot.version += 1
        if where is None:
            return
        self._counts[where] += 1
        if where is Place.BUSY:
            return  # re-placed when its call returns
        heap = self._heaps[where]
        heapq.heappush(heap, (*order, next(self._order), slot.version, slot))
        if len(heap) > 2 * self._counts[where] + 64:
            heap[:] = [entry for entry in heap if self._live(entry, where)]
            heapq.heapify(heap)

    @staticmethod
    def _live(entry: tuple[float, float, int, int, _Slot], where: Place) -> bool:
        slot = entry[4]
        return slot.version == entry[3] and slot.place is where

    def _top(self, where: Place) -> tuple[float, float, int, int, _Slot] | None:
        heap = self._heaps[where]
        while heap and not self._live(heap[0], where):
            heapq.heappop(heap)
        return heap[0] if heap else None

    def advance(self, now: float) -> None:
        """Re-place the slots whose refresh time or interval has come (only those are touched)."""
        for where in (Place.LATER, Place.COOLING):
            while (top := self._top(where)) is not None and top[0] <= now:
                heapq.heappop(self._heaps[where])
                self.place(top[4], now)

    def wanted(self) -> bool:
        """Whether any state is wanted now (sent or not yet), as of the last `advance`."""
        return any(self._counts[where] for where in _WANTED)

    def best(self) -> _Slot | None:
        """The ready slot to send first: most urgent, then oldest."""
        top = self._top(Place.READY)
        return None if top is None else top[4]

    def next_change(self, now: float) -> float:
        """Seconds until a waiting slot's refresh time or interval comes (infinity: none waits)."""
        times = [top[0] for where in (Place.LATER, Place.COOLING) if (top := self._top(where)) is not None]
        return min(times) - now if times else math.inf


def _fenced(send: Send, lease: Lease) -> Send:
    """`send` made under `lease`: dropped once the lease passed on, else made under it (what it sends
    carries the lease, whichever task runs it)."""

    async def fenced() -> bool:
        if not still_held(lease):
            return False  # another replica drives the thread now: what we drew is not shown
        token = HELD.set(lease)
        try:
            return await send()
        finally:
            HELD.reset(token)

    return fenced


class Sender:
    def __init__(
        self,
        name: str,
        *,
        budget: CallBudget | None,
        reserve: float = 0.0,
        interval: float = 0.0,
        concurrency: int = 4,
    ) -> None:
        """`budget` None: no rate limit. `reserve` calls of the budget are kept for URGENT states."""
        self.name, self.budget, self.reserve, self.interval = name, budget, reserve, interval
        self.concurrency = max(1, concurrency)
        self.calls = 0
        self._slots: dict[Hashable, _Slot] = {}
        self._dirty: dict[Hashable, None] = {}  # insertion-ordered set of keys with something to send
        self._schedule = _Schedule(interval)
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Event | None = None
        self._settled: asyncio.Event | None = None
        self._loop_task: asyncio.Task[None] | None = None
        # When the loop wakes by itself, and until when the budget lets no state but an urgent one go:
        # a put that could not go sooner need not wake the loop (see _kick).
        self._asleep_until = math.inf
        self._quiet_until = -math.inf

    # ---- what callers do ---------------------------------------------------------

    def put(
        self,
        key: Hashable,
        send: Send,
        *,
        priority: Priority = Priority.BACKGROUND,
        milestone: str | None = None,
        not_before: float = 0.0,
    ) -> None:
        """`send` shows the key's newest state; it replaces a pending one unless that is a different milestone.
        It runs under the thread lease held now, and not at all once that lease is known lost."""
        lease = HELD.get()
        if lease is not None:
            send = _fenced(send, lease)
        slot = self._slots.pop(key, None) or _Slot(key=key)
        self._slots[key] = slot  # most recently used last
        self._trim()
        if slot.send is not None and slot.milestone is not None and slot.milestone != milestone:
            slot.kept.append((slot.send, slot.priority))
            del slot.kept[:-MAX_KEPT]
            slot.send = None
        if slot.send is not None:
            priority = min(priority, slot.priority)
            milestone = milestone or slot.milestone
            not_before = min(not_before, slot.not_before)
        if not slot.dirty:
            slot.since = time.monotonic()
        slot.send, slot.priority, slot.milestone, slot.not_before = send, priority, milestone, not_before
        self._dirty[key] = None
        self._schedule.place(slot, time.monotonic())
        self._kick(slot.head_priority, 0.0 if slot.kept else not_before)  # a kept milestone goes when it can

    def sent_now(self, key: Hashable) -> None:
        """The key's state was just shown another way (a new message): the interval starts now."""
        slot = self._slots.pop(key, None) or _Slot(key=key)
        self._slots[key] = slot
        slot.last_sent = time.monotonic()
        if slot.place is not None:
            self._schedule.place(slot, slot.last_sent)  # a ready state now waits for its interval
        self._trim()

    def room(self) -> bool:
        """Whether the budget has a call to spare beyond the urgent reserve right now."""
        return self.budget is None or self.budget.level() >= 1.0 + self.reserve

    async def idle(self, timeout: float | None = None) -> bool:
        """True once every state wanted now has been sent (within `timeout` seconds)."""
        if self._settled is None:
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._settled.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        """Send what is still wanted, without the rate limit (shutdown), and stop."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None
        await asyncio.gather(*self._tasks, return_exceptions=True)
        while self._dirty:
            slot = min((self._slots[k] for k in self._dirty), key=lambda s: (s.head_priority, s.since))
            if slot.send is not None and slot.not_before > time.monotonic() and not slot.kept:
                self._dirty.pop(slot.key, None)  # a refresh for later: not wanted now
                continue
            await self._call(slot, self._take(slot))

    # ---- the loop ------------------------------------------------------------------

    def _kick(self, priority: Priority, not_before: float) -> None:
        """Have the loop weigh a new state, unless it wakes by itself before that state could go anyway:
        with a few hundred threads redrawing while the budget is spent, waking it for each put cost more
        than everything else the sender does."""
        if self._wake is None or self._settled is None:
            self._wake, self._settled = asyncio.Event(), asyncio.Event()
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run(), name=f"sender-{self.name}")
        self._settled.clear()
        could_go = not_before if priority is Priority.URGENT else max(not_before, self._quiet_until)
        if self._asleep_until > could_go:
            self._wake.set()

    def _next(self, now: float) -> tuple[_Slot | None, float, bool]:
        """The slot to send now, else how long to wait; and whether anything is wanted now."""
        level = math.inf if self.budget is None else self.budget.level()
        self._quiet_until = -math.inf
        if self.budget is not None and level < 1.0 + self.reserve:  # until then only an urgent state may go
            self._quiet_until = now + self.budget.seconds_until(1.0 + self.reserve)
        # (another spender, e.g. a direct edit, only makes the budget refill later: the loop then wakes early)
        self._schedule.advance(now)
        wanted = self._schedule.wanted()
        if self.budget is not None and level < 1.0:
            return None, self.budget.seconds_until(1.0), wanted  # not even an urgent state could go yet
        best, wait = self._schedule.best(), self._schedule.next_change(now)
        if best is None or self.budget is None:
            return best, wait, wanted
        needed = 1.0 if best.head_priority is Priority.URGENT else 1.0 + self.reserve
        if self.budget.level() >= needed:
            return best, 0.0, wanted
        return None, min(wait, self.budget.seconds_until(needed)), wanted

    async def _run(self) -> None:
        assert self._wake is not None and self._settled is not None
        while True:
            self._wake.clear()
            slot, wait, wanted = self._next(time.monotonic())
            if not wanted and not self._tasks:
                self._settled.set()
            if slot is not None:
                if len(self._tasks) < self.concurrency:
                    self._launch(slot)
                    continue
                wait = math.inf  # woken when a call in flight returns
            self._asleep_until = time.monotonic() + wait
            await wait_set(self._wake, wait)

    def _take(self, slot: _Slot) -> Send:
        if slot.kept:
            send, _ = slot.kept.pop(0)
        else:
            assert slot.send is not None
            send, slot.send, slot.priority, slot.milestone = slot.send, None, Priority.BACKGROUND, None
        if not slot.dirty:
            self._dirty.pop(slot.key, None)
        self._schedule.place(slot, time.monotonic())
        return send

    def _launch(self, slot: _Slot) -> None:
        slot.busy = True
        send = self._take(slot)  # placed as busy: not weighed again until its call returns
        if self.budget is not None:
            self.budget.spend()
        task = asyncio.create_task(self._call(slot, send, budgeted=True))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._wake is not None:
            self._wake.set()

    async def _call(self, slot: _Slot, send: Send, *, budgeted: bool = False) -> None:
        slot.busy = True
        try:
            made = await send()
        except Exception:  # a bug in one key's call must not stop every other key's
            log.exception("slack call failed", extra={"sender": self.name})
            made = True
        finally:
            slot.busy = False
        if made:
            self.calls += 1
            slot.last_sent = time.monotonic()
        elif budgeted and self.budget is not None:
            self.budget.spend(-1.0)  # nothing went out: the call is given back
        self._schedule.place(slot, time.monotonic())

    def _trim(self) -> None:
        excess = len(self._slots) - MAX_TRACKED
        if excess <= 0:
            return
        for key in [k for k, s in self._slots.items() if k not in self._dirty and not s.busy][:excess]:
            del self._slots[key]
