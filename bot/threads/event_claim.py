"""An event's dedupe keys, claimed once what the event did is durable rather than when it was decided.

Typed text the agent answers with a reply is done only when the reply's whole text is recorded: a
process that dies while the reply streams has changed nothing the next start could build on, so the
event (still waiting in the embedded inbox) must be handled again then. Its keys are therefore claimed
together with the reply's whole text (the outbox entry carries them, bot.outbox), at the first output
that changes more than a reply (a run took the text, a menu was shown: from then on a redo would do
it twice), or when the call ends, whichever comes first. Text for a run in progress is claimed when it is
decided, as before: the run keeps it in its own state, and its resume (not the event) carries it on.
"""

from __future__ import annotations

from dataclasses import dataclass

from .dedupe import Deduper


@dataclass
class EventClaim:
    keys: list[str]
    deduper: Deduper
    claimed: bool = False
    final: bool = False  # settled for good (with replicas, a claim made at decision may still be taken over)

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
        if not self.claimed:
            self.claimed = True
            if self.keys:
                await self.deduper.remember_persisted(self.keys)
        elif self.keys:
            await self.deduper.settle_persisted(self.keys)
