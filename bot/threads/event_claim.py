"""Slack delivers at least once, and a thread's events may be decided again after a crash or a takeover:
this is where an event is taken once.

The inbox is the only dedupe. A redelivery (a retry, the app_mention/message pair) finds its delivery id
there and is acknowledged without being queued (bot.inbox). An event taken out of the inbox is decided
under a claim on its row, found by any of its Slack ids, so an event whose process died (or lost the
thread) before marking it done is not handled twice. A claim lives as long as its row: while the event
waits or its work is unsettled, and for the redelivery window after (bot.base.event.REDELIVERY_WINDOW).

When a claim becomes final matters. A click, a form or a control is final once decided. Typed text the
agent answers with a reply is done only when the reply's whole text is recorded: a process that dies
while the reply streams has changed nothing the next start could build on, so the event must be handled
again then. Its claim is therefore settled together with the reply's whole text (the outbox entry
carries its keys, bot.outbox), at the first output that changes more than a reply (a run took the text,
a menu was shown: from then on a redo would do it twice), or when the call ends, whichever comes first.
Text for a run in progress is final once decided: the run keeps it in its own state, and its resume
(not the event) carries it on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..base.event import ThreadEvent


class ClaimStore(Protocol):
    """The inbox's claims: bot.inbox.file_inbox (embedded), bot.inbox.database_inbox (replicas)."""

    async def claim(self, event: ThreadEvent, *, final: bool = False) -> bool: ...

    async def seen(self, keys: list[str]) -> bool: ...

    async def settle(self, keys: list[str]) -> None: ...


@dataclass
class EventClaim:
    """An event's claim, still to be made final once what the event did is durable."""

    keys: list[str]
    store: ClaimStore
    final: bool = False

    @property
    def answers(self) -> str:
        """What a reply to this event answers, as its recorded stream names it."""
        return f"event:{self.keys[0]}" if self.keys else ""

    @property
    def waiting(self) -> tuple[str, ...]:
        """The keys not settled for good yet, recorded with the reply's whole text: a start, or a replica
        taking the thread over, that finds the reply whole counts the event as handled (no redo)."""
        return () if self.final else tuple(self.keys)

    async def settle(self) -> None:
        """The event's effect is durable now: it counts as handled, for good."""
        if self.final:
            return
        self.final = True
        if self.keys:
            await self.store.settle(self.keys)


class Claims:
    """The decisions on an event's claim, made on its inbox row."""

    def __init__(self, store: ClaimStore, *, when_durable: bool) -> None:
        """`when_durable`: typed text the agent may answer is settled once its reply is recorded, because the
        event cut off by a crash still waits in the inbox (embedded); with replicas a claim made at decision
        is taken over by a newer holder of the thread until it is settled."""
        self.store = store
        self.when_durable = when_durable

    async def take(self, event: ThreadEvent, *, final: bool = False) -> bool:
        """False if the event was decided before (by a previous process or another replica); otherwise it
        is claimed now. `final`: what the event does is carried on by a run from here (its resume, not the
        event, goes on after a takeover), so no later holder of the thread handles it again. An event
        without keys cannot be delivered twice."""
        return not event.dedupe or await self.store.claim(event, final=final)

    async def for_reply(self, event: ThreadEvent) -> EventClaim | None:
        """The claim of typed text that a reply may answer: made now, or (`when_durable`) settled once the
        reply is recorded. None: handled before."""
        if not self.when_durable or not event.dedupe:
            return EventClaim(event.dedupe, self.store) if await self.take(event) else None
        return None if await self.store.seen(event.dedupe) else EventClaim(event.dedupe, self.store)

    async def settle(self, keys: list[str]) -> None:
        """Events whose effect is durable (a reply the outbox holds whole) count as handled for good."""
        if keys:
            await self.store.settle(keys)
