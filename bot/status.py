"""The messages the bot edits in place (a run's plan, a reply posted and then edited), through one sender.

Every `chat.update` draws from one budget (`limits.status_edits_per_second`, bursts of
`limits.status_edit_burst`, inside Slack's Tier 3), whoever makes it. Progress only marks a
message with a way to draw its newest state; the sender draws and sends it in turn (see
`bot.slack_send`): what a person must read first, plan redraws with what is left, at most one per
message per `interval`. A phase (a milestone) is never replaced before it is shown, so a run stopped
and at once resumed by a queued reply shows both, in order. Nothing in a run waits for an edit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .outgoing import Edit, Post
from .render.message import SlackMessage
from .slack_port import SlackPort
from .slack_send import MAX_TRACKED, CallBudget, Priority

Render = Callable[[], SlackMessage]
DEFAULT_BURST = 10


@dataclass
class _Shown:
    channel: str
    payload: dict[str, Any] | None  # what the message shows now; identical redraws are skipped


class StatusBoard:
    def __init__(
        self, io: SlackPort, *, interval: float = 1.0, rate: float = 0.67, burst: int = DEFAULT_BURST
    ) -> None:
        """`rate` edits per second on average (0: no limit), `burst` at once; two thirds of the burst are
        kept for what people must read."""
        self.io = io
        budget = CallBudget(rate * 60.0, burst) if rate > 0 else None
        # The port's edit budget: the edits made directly (an answered question's outcome) count too.
        self.sender = io.pacer("chat.update", budget=budget, reserve=burst * 2 // 3, interval=interval)
        self._shown: dict[str, _Shown] = {}
        self.last_failure: BaseException | None = None  # why the newest post failed (for the plan's fallback)

    async def post(self, channel: str, thread_ts: str, message: SlackMessage) -> str | None:
        """Post a new message now; its ts is what later edits target. Not through the outbox: a status
        message is drawn again by the next progress, and without its ts no edit could follow it."""
        delivery = await self.io.send(Post(channel, thread_ts, message, durable=False))
        ts, self.last_failure = delivery.ts, delivery.error
        if ts is not None:
            self._remember(ts, _Shown(channel, message.payload()))
            self.sender.sent_now(ts)
        return ts

    def schedule(
        self,
        channel: str,
        ts: str,
        render: Render,
        *,
        priority: Priority = Priority.BACKGROUND,
        milestone: str | None = None,
    ) -> None:
        """Remember how to draw the message's newest state; it is drawn only when sent (most is coalesced).
        An URGENT state (an outcome, a pause, a reply's final text) goes through the outbox: it is not lost."""
        shown = self._shown.get(ts) or self._remember(ts, _Shown(channel, None))
        durable = priority is Priority.URGENT

        async def send() -> bool:
            message = render()
            payload = message.payload()
            if payload == shown.payload:
                return False
            delivery = await self.io.send(Edit(channel, ts, message, durable=durable, budgeted=True))
            if delivery.sent:
                shown.payload = payload
            return not delivery.fenced

        self.sender.put(ts, send, priority=priority, milestone=milestone)

    def room(self) -> bool:
        """Whether an edit could go out now without touching what is kept for urgent ones."""
        return self.sender.room()

    async def idle(self, timeout: float | None = None) -> bool:
        """True once every scheduled edit has been sent (within `timeout` seconds)."""
        return await self.sender.idle(timeout)

    async def close(self) -> None:
        """Send what is still pending, without the rate limit (shutdown), and stop the sender."""
        await self.sender.close()

    def _remember(self, ts: str, shown: _Shown) -> _Shown:
        self._shown.pop(ts, None)
        self._shown[ts] = shown
        while len(self._shown) > MAX_TRACKED:
            del self._shown[next(iter(self._shown))]
        return shown
