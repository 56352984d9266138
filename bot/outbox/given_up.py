"""Given-up outbox entries as the people they were for see them: per thread owner, with why."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import closing
from pathlib import Path
from typing import Protocol

from ..base.thread import ThreadBrief, ThreadKey
from .entry import Ledger, OutboxEntry
from .sqlite_ledger import read_given_up

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


def given_up_for_run(home: Path, run_id: str) -> list[tuple[str, str]]:
    """(text, reason) of what the embedded bot under `home` gave up in the threads of run `run_id`
    (blocking: for `crewagent runs show`)."""
    threads_file = home / "slack" / "threads.sqlite"
    if not threads_file.exists():
        return []
    paths = ("$.session.run_id", "$.session.last_run_id", "$.status_run_id")
    where = " OR ".join(f"json_extract(value, '{path}') = ?" for path in paths)
    try:
        with closing(sqlite3.connect(f"file:{threads_file}?mode=ro", uri=True, timeout=5.0)) as db:
            keys = {str(row[0]) for row in db.execute(f'SELECT key FROM "threads" WHERE {where}', (run_id,) * 3)}
    except sqlite3.Error:
        return []
    return in_threads(read_given_up(home / "slack" / "outbox.sqlite", time.time() - SHOWN_FOR), keys)


def in_threads(entries: Sequence[OutboxEntry], thread_keys: set[str]) -> list[tuple[str, str]]:
    """(text, reason) of the entries posted into one of these threads."""
    threads = {(k.channel, k.thread_ts) for k in map(ThreadKey.parse, thread_keys) if k is not None}
    return [(entry_text(e), e.error or "refused") for e in entries if (e.channel, e.thread_ts or "") in threads]
