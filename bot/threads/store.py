"""Slack thread ↔ session records, persisted in sqlitedict so conversations survive restarts.

Every sqlite call runs in a worker thread (asyncio.to_thread): sqlitedict blocks on its own
writer thread, and the event loop must stay free to ack Slack within milliseconds.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from contextlib import closing
from pathlib import Path

from sqlitedict import SqliteDict

from ..base.thread import BRIEF_PATHS, ThreadBrief, ThreadKey, ThreadRecord
from ..base.event import REDELIVERY_WINDOW

OWNER_INDEX = "threads_by_owner"


def open_table(path: Path, table: str) -> SqliteDict:
    return SqliteDict(
        str(path),
        tablename=table,
        autocommit=True,
        journal_mode="WAL",
        encode=json.dumps,
        decode=json.loads,
        outer_stack=False,
    )


class ThreadStore:
    """Thread records and the set of already-handled Slack deliveries, under `<home>/slack/`."""

    def __init__(self, directory: Path, *, redelivery_window: float = REDELIVERY_WINDOW) -> None:
        self.directory = directory
        self.redelivery_window = redelivery_window
        self._threads: SqliteDict | None = None
        self._seen: SqliteDict | None = None

    async def open(self) -> None:
        def _open_all() -> tuple[SqliteDict, SqliteDict]:
            self.directory.mkdir(parents=True, exist_ok=True)
            return (
                open_table(self.directory / "threads.sqlite", "threads"),
                open_table(self.directory / "seen.sqlite", "seen"),
            )

        self._threads, self._seen = await asyncio.to_thread(_open_all)
        await asyncio.to_thread(self._index_owners)

    async def close(self) -> None:
        for db in (self._threads, self._seen):
            if db is not None:
                await asyncio.to_thread(db.close)
        self._threads = self._seen = None

    @property
    def threads(self) -> SqliteDict:
        if self._threads is None:
            raise RuntimeError("ThreadStore is not open")
        return self._threads

    @property
    def seen_db(self) -> SqliteDict:
        if self._seen is None:
            raise RuntimeError("ThreadStore is not open")
        return self._seen

    async def get(self, key: ThreadKey) -> ThreadRecord | None:
        raw = await asyncio.to_thread(self.threads.get, str(key))
        return ThreadRecord.model_validate(raw) if raw is not None else None

    async def put(self, record: ThreadRecord) -> None:
        data = record.model_dump(mode="json")
        await asyncio.to_thread(self.threads.__setitem__, str(record.key), data)

    async def all(self) -> list[ThreadRecord]:
        rows = await asyncio.to_thread(lambda: list(self.threads.values()))
        return [ThreadRecord.model_validate(raw) for raw in rows]

    async def count(self) -> int:
        return await asyncio.to_thread(len, self.threads)

    def _index_owners(self) -> None:
        table = self.threads.tablename
        self.threads.conn.execute(
            f'CREATE INDEX IF NOT EXISTS {OWNER_INDEX} ON "{table}" (json_extract(value, \'$.session.owner\'))'
        )
        self.threads.commit()

    async def briefs(self, owner: str | None) -> list[ThreadBrief]:
        """The threads `owner` owns (an indexed query), or every thread for None."""
        paths = ", ".join(f"'$.{path}'" for path in BRIEF_PATHS)  # one call: the record is parsed once
        query = f'SELECT key, json_extract(value, {paths}) FROM "{self.threads.tablename}"'
        args: tuple[str, ...] = ()
        if owner is not None:
            query += " WHERE json_extract(value, '$.session.owner') = ?"
            args = (owner,)

        def select() -> list[ThreadBrief]:
            # A reader connection of its own (WAL): sqlitedict hands rows over one by one through a queue.
            with closing(sqlite3.connect(self.threads.filename, timeout=5.0)) as db:
                found = db.execute(query, args).fetchall()
            rows = (ThreadBrief.from_row([key, *json.loads(fields)]) for key, fields in found)
            return [brief for brief in rows if brief is not None]

        return await asyncio.to_thread(select)

    async def seen(self, keys: list[str]) -> bool:
        """True if any of `keys` was handled (a redelivery, possibly from before a restart)."""

        def check() -> bool:
            return any(k in self.seen_db for k in keys)

        return await asyncio.to_thread(check)

    async def settle(self, keys: list[str]) -> None:
        """A claim here is final when it is made: one process owns every thread."""

    async def claim(self, keys: list[str], *, final: bool = False) -> bool:
        """Record `keys` as handled; False if any was already handled."""

        def check_and_mark() -> bool:
            now = time.time()
            if any(k in self.seen_db for k in keys):
                return False
            for k in keys:
                self.seen_db[k] = now
            return True

        return await asyncio.to_thread(check_and_mark)

    async def remember(self, keys: list[str]) -> None:
        def write() -> None:
            now = time.time()
            for k in keys:
                self.seen_db[k] = now

        await asyncio.to_thread(write)

    async def prune_seen(self, keep: frozenset[str] = frozenset()) -> int:
        """Forget claims older than the redelivery window, but those of events still kept (`keep`: the
        keys of what the journal holds), whose redo must still find them. Called once the journal's
        events were queued again at start-up."""

        def prune() -> int:
            cutoff = time.time() - self.redelivery_window
            old = [k for k, t in self.seen_db.items() if float(t) < cutoff and k not in keep]
            for k in old:
                del self.seen_db[k]
            return len(old)

        return await asyncio.to_thread(prune)
