"""Slack's assistant status line ("is writing artifacts/stories/1-2.md…") under a thread while the bot works.

Many events want to change a thread's line; only the newest wording matters. One sender task
sends each thread's newest wording at most once per `interval` seconds (clearing goes first),
and at most `rate` calls per second for all threads together, so a busy bot stays inside the
method's rate tier. A thread where Slack refuses the method shows the working reaction on the
user's message instead (what the bot did before), decided once per thread. Slack drops a line
after two minutes without a message, so a line still wanted after `REFRESH_AFTER` is sent again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from slack_bolt.context.set_status.async_set_status import AsyncSetStatus
from slack_sdk.web.async_client import AsyncWebClient

from .fallbacks import SLACK_FAILURES, STATUS, Fallbacks
from ..slack_io import SlackIO
from ..threads.store import ThreadKey
from ..waits import wait_set

log = logging.getLogger(__name__)

WORKING_REACTION = "hourglass_flowing_sand"
THINKING = "Waiting for the model"
STATUS_VERB = "is working…"
MAX_LOADING_MESSAGES = 10
REFRESH_AFTER = 100.0  # seconds; Slack clears a status line after 120 s without a reply


@dataclass
class _Line:
    key: ThreadKey
    wanted: str  # "" = cleared
    shown: str = ""
    last_sent: float = 0.0
    reaction_ts: str | None = None  # where the fallback reaction goes
    reacted: bool = False


class StatusLines:
    def __init__(
        self,
        client: AsyncWebClient,
        io: SlackIO,
        fallbacks: Fallbacks,
        *,
        interval: float = 2.0,
        rate: float = 1.5,
        refresh_after: float = REFRESH_AFTER,
    ) -> None:
        self.client, self.io, self.fallbacks = client, io, fallbacks
        self.interval, self.rate, self.refresh_after = interval, rate, refresh_after
        self.calls = 0
        self._lines: dict[ThreadKey, _Line] = {}
        self._dirty: dict[ThreadKey, None] = {}
        self._wake: asyncio.Event | None = None
        self._settled: asyncio.Event | None = None
        self._sender: asyncio.Task[None] | None = None

    def working(self, key: ThreadKey, what: str = THINKING, *, reaction_ts: str | None = None) -> None:
        """Show `what` under the thread (replacing what it showed)."""
        line = self._lines.setdefault(key, _Line(key=key, wanted=""))
        if reaction_ts:
            line.reaction_ts = reaction_ts
        if what != line.wanted:
            line.wanted = what
            self._mark(key)

    def replied(self, key: ThreadKey) -> None:
        """The bot just posted in the thread, which clears Slack's line by itself."""
        line = self._lines.get(key)
        if line is not None and self.fallbacks.allows(str(key), STATUS):
            line.shown = ""
            if line.wanted and key not in self._dirty:
                line.wanted = ""  # shown again by the next activity

    def done(self, key: ThreadKey) -> None:
        """The work for this thread is over: clear the line (or take the reaction away)."""
        line = self._lines.get(key)
        if line is None:
            return
        line.wanted = ""
        self._mark(key)

    def _mark(self, key: ThreadKey) -> None:
        self._dirty[key] = None
        if self._wake is None or self._settled is None:
            self._wake, self._settled = asyncio.Event(), asyncio.Event()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_loop(), name="status-lines")
        self._settled.clear()
        self._wake.set()

    def _refresh_in(self, now: float) -> float | None:
        """Seconds until the oldest line on show needs sending again (None: nothing is shown)."""
        shown = [line.last_sent for line in self._lines.values() if line.shown and line.shown == line.wanted]
        return max(0.0, min(shown) + self.refresh_after - now) if shown else None

    def _refresh(self, now: float) -> None:
        for line in self._lines.values():
            if line.shown and line.shown == line.wanted and now - line.last_sent >= self.refresh_after:
                self._dirty[line.key] = None  # sent again: Slack is about to drop it
        if self._dirty and self._settled is not None:
            self._settled.clear()

    def _next(self, now: float) -> tuple[_Line | None, float]:
        wait = float("inf")
        for key in self._dirty:
            line = self._lines[key]
            if not line.wanted:
                return line, 0.0  # clearing never waits
            due = line.last_sent + self.interval - now
            if due <= 0:
                return line, 0.0
            wait = min(wait, due)
        return None, wait

    async def _send_loop(self) -> None:
        assert self._wake is not None and self._settled is not None
        while True:
            if not self._dirty:
                self._settled.set()
                self._wake.clear()
                if not await wait_set(self._wake, self._refresh_in(time.monotonic())):
                    self._refresh(time.monotonic())
                continue
            line, wait = self._next(time.monotonic())
            if line is None:
                self._wake.clear()
                await wait_set(self._wake, wait)
                continue
            self._dirty.pop(line.key, None)
            try:
                await self._send(line)
            except Exception:  # a bug here must not stop every other thread's line
                log.exception("status line failed")
            if not line.wanted and not line.reacted and line.key not in self._dirty:
                self._lines.pop(line.key, None)
            if self.rate > 0:
                await asyncio.sleep(1.0 / self.rate)

    async def _send(self, line: _Line) -> None:
        key = line.key
        if not self.fallbacks.allows(str(key), STATUS):
            await self._react(line)
            return
        if line.wanted == line.shown and time.monotonic() - line.last_sent < self.refresh_after:
            return
        line.last_sent = time.monotonic()
        set_status = AsyncSetStatus(self.client, key.channel, key.thread_ts)
        wanted = line.wanted  # what this call shows, whatever is wanted by the time it returns
        try:
            self.calls += 1
            await set_status(status=STATUS_VERB if wanted else "", loading_messages=[wanted] if wanted else None)
            line.shown = wanted
        except SLACK_FAILURES as exc:
            self.fallbacks.fall_back(str(key), STATUS, exc)
            await self._react(line)

    async def _react(self, line: _Line) -> None:
        """The old way: a reaction on the message being handled while there is work."""
        if line.reaction_ts is None or bool(line.wanted) == line.reacted:
            return
        line.reacted = bool(line.wanted)
        await self.io.react(line.key.channel, line.reaction_ts, WORKING_REACTION, add=line.reacted)

    async def idle(self, timeout: float | None = None) -> bool:
        """True once every thread's line shows what it should."""
        if self._settled is None:
            return True
        try:
            async with asyncio.timeout(timeout):
                await self._settled.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)
            self._sender = None
