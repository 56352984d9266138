"""The embedded bot's outbox: one sqlite file in its data folder (`<home>/slack/outbox.sqlite`).

Every call runs on one worker thread that owns the connection (sqlite wants one writer), with a
time limit, so the event loop never waits on the disk. Each write is one transaction.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from .entry import LedgerUnavailable, OutboxEntry

T = TypeVar("T")
CALL_TIMEOUT = 10.0  # seconds one store call may take
KEEP_GIVEN_UP = 7 * 24 * 3600.0  # given-up entries are shown for a week, then forgotten

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    entry TEXT NOT NULL,
    state TEXT NOT NULL,
    done_at REAL
);
CREATE INDEX IF NOT EXISTS outbox_by_state ON outbox (state, seq);
"""


class SqliteLedger:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._worker: ThreadPoolExecutor | None = None

    async def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        if self._worker is None or self._db is None:
            raise RuntimeError("the outbox is not open")
        db = self._db

        def in_transaction() -> T:
            try:
                with db:
                    return work(db)
            except sqlite3.OperationalError as exc:  # locked too long, disk full, file gone
                raise LedgerUnavailable(str(exc)) from exc

        future = asyncio.get_running_loop().run_in_executor(self._worker, in_transaction)
        return await asyncio.wait_for(future, CALL_TIMEOUT)

    async def open(self) -> None:
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="outbox")

        def connect() -> sqlite3.Connection:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(str(self.path), timeout=5.0, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: a commit survives a kill -9 (a power cut may lose the last)
            db.executescript(SCHEMA)
            db.execute("DELETE FROM outbox WHERE state = 'given_up' AND done_at < ?", (time.time() - KEEP_GIVEN_UP,))
            db.commit()
            return db

        self._db = await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(self._worker, connect), CALL_TIMEOUT)

    async def close(self) -> None:
        worker, db = self._worker, self._db
        self._worker = self._db = None
        if worker is None:
            return
        if db is not None:
            await asyncio.get_running_loop().run_in_executor(worker, db.close)
        worker.shutdown(wait=False)

    async def add(self, entry: OutboxEntry) -> None:
        def insert(db: sqlite3.Connection) -> int:
            cur = db.execute(
                "INSERT INTO outbox (id, entry, state) VALUES (?, ?, 'pending')", (entry.id, entry.model_dump_json())
            )
            return int(cur.lastrowid or 0)

        entry.seq = await self._run(insert)

    async def replace(self, entry: OutboxEntry) -> None:
        data = entry.model_dump_json()
        await self._run(lambda db: db.execute("UPDATE outbox SET entry = ? WHERE id = ?", (data, entry.id)))

    async def claim(self, entry_id: str) -> bool:
        """One process owns every thread it writes for: nothing to fence."""
        return True

    async def sent(self, entry_id: str) -> None:
        await self._run(lambda db: db.execute("DELETE FROM outbox WHERE id = ?", (entry_id,)))

    async def give_up(self, entry_id: str, error: str) -> None:
        def mark(db: sqlite3.Connection) -> None:
            row = db.execute("SELECT entry FROM outbox WHERE id = ?", (entry_id,)).fetchone()
            if row is None:
                return
            entry = OutboxEntry.model_validate_json(row[0]).model_copy(update={"state": "given_up", "error": error})
            db.execute(
                "UPDATE outbox SET entry = ?, state = 'given_up', done_at = ? WHERE id = ?",
                (entry.model_dump_json(), time.time(), entry_id),
            )

        await self._run(mark)

    async def pending(self) -> list[OutboxEntry]:
        return await self._select("SELECT seq, entry FROM outbox WHERE state = 'pending' ORDER BY seq", ())

    async def take_thread(self, thread: str) -> list[OutboxEntry]:
        """One process owns every thread: its start took all there was (`pending`)."""
        return []

    async def given_up(self, since: float) -> list[OutboxEntry]:
        return await self._select(
            "SELECT seq, entry FROM outbox WHERE state = 'given_up' AND done_at >= ? ORDER BY seq", (since,)
        )

    async def _select(self, query: str, args: tuple[object, ...]) -> list[OutboxEntry]:
        rows = await self._run(lambda db: db.execute(query, args).fetchall())
        return [OutboxEntry.model_validate({**json.loads(entry), "seq": seq}) for seq, entry in rows]


def read_given_up(path: Path, since: float = 0.0) -> list[OutboxEntry]:
    """Given-up entries straight from the file (blocking; for the command line, which has no loop)."""
    if not path.exists():
        return []
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5.0) as db:
        try:
            rows = db.execute(
                "SELECT seq, entry FROM outbox WHERE state = 'given_up' AND done_at >= ? ORDER BY seq", (since,)
            ).fetchall()
        except sqlite3.OperationalError:  # no outbox table yet
            return []
    return [OutboxEntry.model_validate({**json.loads(entry), "seq": seq}) for seq, entry in rows]
