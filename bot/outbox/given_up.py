"""Given-up outbox entries as the people they were for see them: per thread owner, with why."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from ..base.thread import ThreadBrief, ThreadKey
from .entry import Ledger, OutboxEntry

SHOWN_FOR = 7 * 24 * 3600.0  # seconds a given-up message stays on its owner's Home tab


class Briefs(Protocol):
    async def briefs(self, owner: str | None) -> list[ThreadBrief]: ...


def entry_text(entry: OutboxEntry) -> str:
    """The message's plain text (its notification text), for a list."""
    return str(entry.payload.get("text") or "").strip() or "(a message without text)"


def owned_by(briefs: Briefs, ledger: Ledger) -> Callable[[str], Awaitable[Sequence[tuple[ThreadKey, str, str]]]]:
    """For the Home tab: (thread, text, reason) of what the outbox gave up in `user`'s threads this week."""

    async def given_up(user: str) -> Sequence[tuple[ThreadKey, str, str]]:
        entries = await ledger.given_up(time.time() - SHOWN_FOR)
        if not entries:
            return []
        threads = {(b.key.channel, b.key.thread_ts): b.key for b in await briefs.briefs(user)}
        found = []
        for entry in entries:
            key = threads.get((entry.channel, entry.thread_ts or ""))
            if key is not None:
                found.append((key, entry_text(entry), entry.error or "refused"))
        return found

    return given_up
