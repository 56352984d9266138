"""Thread events kept in a local sqlite file from before Slack gets its ack until they are safe
elsewhere, so a process that dies (even by kill -9) loses none of them. One class, two files that
never mix:

- `<home>/slack/journal.sqlite` (replicas): events taken while the database was away, until they
  can be queued in Postgres. Slack redelivers an event it got no answer for only after about a
  minute, then five; an owner's answer would wait that long after a short database outage. When
  the database is back they are queued in order, with their delivery ids, so a redelivery is
  still handled once (bot.replicas.handover).
- `<home>/slack/pending.sqlite` (embedded, no database): every event queued on a thread's lane,
  until the lane has run it (bot.threads.pending_events).

Each write is one sqlite transaction on a worker thread, with a timeout. An event that cannot be
written here is not acknowledged (Slack sends it again).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from contextlib import closing
from pathlib import Path

from .base.event import ThreadEvent

log = logging.getLogger(__name__)

CALL_TIMEOUT = 5.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event TEXT NOT NULL,
    control TEXT
);
"""

Journaled = tuple[int, ThreadEvent, ThreadEvent | None]


class EventJournal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0  # events waiting here (as far as this process knows)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(self.path), timeout=CALL_TIMEOUT)
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(SCHEMA)
        return db

    async def add(self, event: ThreadEvent, control: ThreadEvent | None = None) -> int:
        """Keep the event; returns its place (for `done`). Raises OSError / sqlite3.Error / TimeoutError
        when it cannot be kept (then it is not acked)."""

        def write() -> int:
            with closing(self._connect()) as db, db:
                cursor = db.execute(
                    "INSERT INTO journal (event, control) VALUES (?, ?)",
                    (event.model_dump_json(), control.model_dump_json() if control is not None else None),
                )
                return int(cursor.lastrowid or 0)

        seq = await asyncio.wait_for(asyncio.to_thread(write), CALL_TIMEOUT)
        self.count += 1
        return seq

    async def waiting(self) -> list[Journaled]:
        """What is kept, oldest first."""

        def read() -> list[tuple[int, str, str | None]]:
            if not self.path.exists():
                return []
            with closing(self._connect()) as db:
                return list(db.execute("SELECT seq, event, control FROM journal ORDER BY seq"))

        try:
            rows = await asyncio.wait_for(asyncio.to_thread(read), CALL_TIMEOUT)
        except sqlite3.Error as exc:  # not a journal we can read: nothing was kept in it either
            log.error("the local event journal cannot be read", extra={"path": str(self.path), "error": str(exc)})
            return []
        found: list[Journaled] = []
        unreadable: list[int] = []
        for seq, event, control in rows:
            try:
                found.append(
                    (seq, ThreadEvent.model_validate(json.loads(event)),
                     ThreadEvent.model_validate(json.loads(control)) if control else None)
                )
            except ValueError:
                unreadable.append(seq)  # written by another version: it would be skipped at every start
        self.count = len(rows)
        for seq in unreadable:
            log.error("a kept event cannot be read and is dropped", extra={"path": str(self.path), "seq": seq})
            await self.done(seq)
        return found

    async def done(self, seq: int) -> None:
        def delete() -> None:
            with closing(self._connect()) as db, db:
                db.execute("DELETE FROM journal WHERE seq = ?", (seq,))

        await asyncio.wait_for(asyncio.to_thread(delete), CALL_TIMEOUT)
        self.count = max(0, self.count - 1)
