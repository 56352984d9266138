"""Slack delivers at least once: retries and the app_mention/message pair must be handled once.

A delivery is identified by several keys (its event_id and the message it is about);
the first delivery claiming any of them wins. The in-memory LRU answers synchronously
(no await between check and mark, so concurrent duplicates cannot both pass). A redelivery that
arrives after a restart, or at another replica, finds its delivery id in the inbox and is not queued
again (bot.inbox). The persisted half is the inbox too: an event's row, found by any of its keys, is
its claim, decided when the event is decided, so an event taken out of the inbox whose process died
(or lost the thread) before marking it done is not handled twice. A claim lives as long as its row:
while the event waits or its work is unsettled, and for the redelivery window after
(bot.base.event.REDELIVERY_WINDOW).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from ..base.event import ThreadEvent


class ClaimStore(Protocol):
    """The inbox's claims: bot.inbox.file_inbox (embedded), bot.inbox.database_inbox (replicas)."""

    async def claim(self, event: ThreadEvent, *, final: bool = False) -> bool: ...

    async def settle(self, keys: list[str]) -> None: ...

    async def seen(self, keys: list[str]) -> bool: ...

    async def remember(self, keys: list[str]) -> None: ...


class Deduper:
    def __init__(self, store: ClaimStore, *, capacity: int = 20_000) -> None:
        self.store = store
        self.capacity = capacity
        self._recent: OrderedDict[str, None] = OrderedDict()

    def claim(self, keys: list[str]) -> bool:
        """Mark `keys` as taken; False if any of them was already taken in this process."""
        if any(k in self._recent for k in keys):
            for k in keys:
                self._recent[k] = None
                self._recent.move_to_end(k)
            return False
        for k in keys:
            self._recent[k] = None
        while len(self._recent) > self.capacity:
            self._recent.popitem(last=False)
        return True

    def release(self, keys: list[str]) -> None:
        """The delivery could not be recorded (and gets no ack): its redelivery must not count as a duplicate."""
        for k in keys:
            self._recent.pop(k, None)

    async def claim_persisted(self, event: ThreadEvent, *, final: bool = False) -> bool:
        """False if a previous process already handled the event (its row, found by any of its keys, is
        claimed); otherwise claim it durably. An event without keys cannot be delivered twice.
        `final`: what the event does is carried on by a run from here (its resume, not the event, goes on
        after a takeover), so no later holder of the thread handles it again."""
        return not event.dedupe or await self.store.claim(event, final=final)

    async def settle_persisted(self, keys: list[str]) -> None:
        """The event's effect is durable now: its claim is final (see `claim_persisted`)."""
        await self.store.settle(keys)

    async def seen_persisted(self, keys: list[str]) -> bool:
        """True if a previous process (or this one) already handled one of `keys`; nothing is recorded."""
        return await self.store.seen(keys)

    async def remember_persisted(self, keys: list[str]) -> None:
        """Record `keys` as handled (an event whose effect is now durable, bot.threads.event_claim)."""
        await self.store.remember(keys)
