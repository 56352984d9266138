"""The live run status messages: one per run, edited in place, edits coalesced and rate-limited.

A fast run produces many progress events, and many runs share one Slack rate budget
(chat.update allows roughly one call per second per workspace, with bursts). So progress
only marks a status message dirty with a way to draw its newest state; one sender task
draws and sends dirty messages, at most `rate` edits per second overall and at most one per
`interval` seconds per message. Phase changes are urgent: they skip the per-message interval
and go first, and a newer state never replaces one that is still waiting to be sent (a run
stopped and at once resumed by a queued reply shows both phases, in order). Nothing in a run
waits for an edit, so Slack's pace never slows a run down.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .render.blocks import SlackMessage
from .slack_io import SlackIO
from .waits import wait_set

Render = Callable[[], SlackMessage]
MAX_TRACKED = 2000  # status messages remembered for coalescing; older idle ones are forgotten
MAX_KEPT = 8  # urgent states waiting behind newer ones, per message; beyond that the oldest go


@dataclass
class _Slot:
    channel: str
    ts: str
    render: Render | None = None  # drawn only when sent: most progress is coalesced away
    urgent: bool = False
    kept: list[Render] = field(default_factory=list)  # urgent states superseded before they were sent
    last_payload: dict[str, Any] | None = None  # what the message shows now; identical redraws are skipped
    last_sent: float = 0.0


class StatusBoard:
    def __init__(self, io: SlackIO, *, interval: float = 1.0, rate: float = 3.0) -> None:
        self.io = io
        self.interval = interval
        self.rate = rate
        self.edits = 0  # chat.update calls made
        self._slots: dict[str, _Slot] = {}
        self._dirty: dict[str, None] = {}  # insertion-ordered set of ts
        self._wake: asyncio.Event | None = None
        self._sender: asyncio.Task[None] | None = None
        self._settled: asyncio.Event | None = None

    async def post(self, channel: str, thread_ts: str, message: SlackMessage) -> str | None:
        """Post a new status message now; its ts is what later edits target."""
        ts = await self.io.post(channel, thread_ts, message)
        if ts is not None:
            self._slots[ts] = _Slot(channel=channel, ts=ts, last_payload=message.payload(), last_sent=time.monotonic())
            self._trim()
        return ts

    def schedule(self, channel: str, ts: str, render: Render, *, urgent: bool = False) -> None:
        """Remember how to draw the message's newest state; the sender draws and sends it in turn."""
        slot = self._slots.pop(ts, None) or _Slot(channel=channel, ts=ts)
        self._slots[ts] = slot  # most recently used last
        self._trim()
        if slot.render is not None and slot.urgent:
            slot.kept.append(slot.render)  # a phase the message has not shown yet: shown before this one
            del slot.kept[:-MAX_KEPT]
        slot.render = render
        slot.urgent = slot.urgent or urgent
        self._dirty[ts] = None
        self._ensure_sender()
        assert self._wake is not None and self._settled is not None
        self._settled.clear()
        self._wake.set()

    def _ensure_sender(self) -> None:
        if self._wake is None:
            self._wake, self._settled = asyncio.Event(), asyncio.Event()
            self._settled.set()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_loop(), name="status-sender")

    def _next(self, now: float) -> tuple[_Slot | None, float]:
        """The slot to send now (urgent first, then the oldest that is due), or how long to wait."""
        wait = float("inf")
        for ts in self._dirty:
            if self._slots[ts].urgent:
                return self._slots[ts], 0.0
        for ts in self._dirty:
            slot = self._slots[ts]
            due = slot.last_sent + self.interval - now
            if due <= 0:
                return slot, 0.0
            wait = min(wait, due)
        return None, wait

    async def _send_loop(self) -> None:
        assert self._wake is not None and self._settled is not None
        while True:
            if not self._dirty:
                self._settled.set()
                self._wake.clear()
                await self._wake.wait()
                continue
            slot, wait = self._next(time.monotonic())
            if slot is None:
                self._wake.clear()
                await wait_set(self._wake, wait)
                continue
            await self._send(slot)
            if self.rate > 0:
                await asyncio.sleep(1.0 / self.rate)

    async def _send(self, slot: _Slot) -> None:
        if slot.kept:
            render = slot.kept.pop(0)  # the message stays dirty and urgent for what is behind it
        else:
            render, slot.render, slot.urgent = slot.render, None, False
            self._dirty.pop(slot.ts, None)
        if render is None:
            return
        message = render()
        payload = message.payload()
        if payload == slot.last_payload:
            return
        slot.last_sent = time.monotonic()
        self.edits += 1
        if await self.io.update(slot.channel, slot.ts, message):
            slot.last_payload = payload

    async def idle(self, timeout: float | None = None) -> bool:
        """True once every scheduled edit has been sent (within `timeout` seconds)."""
        if self._settled is None:
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._settled.wait()
        except TimeoutError:
            return False
        return True

    def _trim(self) -> None:
        excess = len(self._slots) - MAX_TRACKED
        if excess <= 0:
            return
        for ts in [t for t in self._slots if t not in self._dirty][:excess]:
            del self._slots[ts]

    async def close(self) -> None:
        """Send what is still pending, without the rate limit (shutdown), and stop the sender."""
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)
            self._sender = None
        while self._dirty:
            await self._send(self._slots[next(iter(self._dirty))])
