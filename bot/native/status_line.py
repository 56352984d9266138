"""Slack's assistant status line ("is writing artifacts/stories/1-2.md…") under a thread while the bot works.

Many events want to change a thread's line; only the newest wording matters. The line's sender
(`bot.slack_send`) sends each thread's newest wording at most once per `interval` seconds, within
`rate` calls per second for all threads together, so a busy bot stays inside the method's own
limit; clearing a line (the work is over) is urgent and goes first. A thread where Slack refuses
the method shows the working reaction on the user's message instead (what the bot did before),
decided once per thread. Slack drops a line after two minutes without a message, so a line still
wanted after `REFRESH_AFTER` is sent again.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from .fallbacks import STATUS, Fallbacks
from ..outgoing import Reaction, StatusLine
from ..slack_port import SlackPort
from ..slack_send import CallBudget, Priority
from ..base.thread import ThreadKey


WORKING_REACTION = "hourglass_flowing_sand"
THINKING = "Waiting for the model"
STATUS_VERB = "is working…"
MAX_LOADING_MESSAGES = 10
REFRESH_AFTER = 100.0  # seconds; Slack clears a status line after 120 s without a reply
BURST = 3  # calls at once; one of them is kept for clearing lines
RETRY_AFTER = 2.0  # seconds before a line Slack could not take (a 5xx, a timeout) is sent again


@dataclass
class _Line:
    key: ThreadKey
    wanted: str  # "" = cleared
    shown: str = ""
    last_sent: float = 0.0
    reaction_ts: str | None = None  # where the fallback reaction goes
    reacted: bool = False
    queued: bool = False  # a change waits in the sender
    retrying: bool = False  # the last call failed for a reason that passes: it is sent again later


class StatusLines:
    def __init__(
        self,
        io: SlackPort,
        fallbacks: Fallbacks,
        *,
        interval: float = 2.0,
        rate: float = 1.5,
        refresh_after: float = REFRESH_AFTER,
    ) -> None:
        self.io, self.fallbacks = io, fallbacks
        self.refresh_after = refresh_after
        budget = CallBudget(rate * 60.0, BURST) if rate > 0 else None
        self.sender = io.pacer("assistant.threads.setStatus", budget=budget, reserve=1, interval=interval)
        self._lines: dict[ThreadKey, _Line] = {}

    @property
    def calls(self) -> int:
        return self.sender.calls

    def working(self, key: ThreadKey, what: str = THINKING, *, reaction_ts: str | None = None) -> None:
        """Show `what` under the thread (replacing what it showed)."""
        line = self._lines.setdefault(key, _Line(key=key, wanted=""))
        if reaction_ts:
            line.reaction_ts = reaction_ts
        if what != line.wanted:
            line.wanted = what
            self._queue(line, Priority.BACKGROUND)

    def replied(self, key: ThreadKey) -> None:
        """The bot just posted in the thread, which clears Slack's line by itself."""
        line = self._lines.get(key)
        if line is not None and self.fallbacks.allows(str(key), STATUS):
            line.shown = ""
            if line.wanted and not line.queued:
                line.wanted = ""  # shown again by the next activity

    def done(self, key: ThreadKey) -> None:
        """The work for this thread is over: clear the line (or take the reaction away), before other lines."""
        line = self._lines.get(key)
        if line is None:
            return
        line.wanted = ""
        self._queue(line, Priority.URGENT)

    def _queue(self, line: _Line, priority: Priority, *, later: float = 0.0) -> None:
        line.queued = not later

        async def send() -> bool:  # dropped by the sender once the thread's lease is lost
            line.queued = False
            try:
                return await self._send(line)
            finally:
                if not line.wanted and not line.reacted and not line.queued and not line.retrying:
                    self._lines.pop(line.key, None)

        self.sender.put(line.key, send, priority=priority, not_before=later)

    async def _send(self, line: _Line) -> bool:
        key = line.key
        if not self.fallbacks.allows(str(key), STATUS):
            return await self._react(line)
        now = time.monotonic()
        if line.wanted == line.shown and (not line.shown or now - line.last_sent < self.refresh_after):
            return False
        line.last_sent = now
        wanted = line.wanted  # what this call shows, whatever is wanted by the time it returns
        delivery = await self.io.send(
            StatusLine(key.channel, key.thread_ts, STATUS_VERB if wanted else "", [wanted] if wanted else None)
        )
        if delivery.fenced:
            return False
        if delivery.sent:
            line.shown = wanted
            line.retrying = False
        else:
            exc = delivery.error or "status line refused"
            if self.fallbacks.fall_back(str(key), STATUS, exc):
                line.retrying = False
                await self._react(line)
            else:  # Slack could not answer now: the line's newest wording is sent again in a moment
                line.retrying = True
                line.last_sent = 0.0
                self._queue(line, Priority.BACKGROUND, later=time.monotonic() + RETRY_AFTER)
            return True
        if wanted and not line.queued:
            self._queue(line, Priority.BACKGROUND, later=time.monotonic() + self.refresh_after)  # Slack drops it
        return True

    async def _react(self, line: _Line) -> bool:
        """The old way: a reaction on the message being handled while there is work."""
        if line.reaction_ts is None or bool(line.wanted) == line.reacted:
            return False
        line.reacted = bool(line.wanted)
        await self.io.send(Reaction(line.key.channel, line.reaction_ts, WORKING_REACTION, add=line.reacted))
        return True

    async def idle(self, timeout: float | None = None) -> bool:
        """True once every thread's line shows what it should."""
        return await self.sender.idle(timeout)

    async def close(self) -> None:
        await self.sender.close()
