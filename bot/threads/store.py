"""Slack thread ↔ session records, persisted in sqlitedict so conversations survive restarts, and who
opened the Home tab lately. (Handled deliveries are the inbox's claims, bot.inbox.file_inbox; the
`seen.sqlite` an earlier version kept beside these files is no longer read.)

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
    """Thread records and Home tab viewers, under `<home>/slack/threads.sqlite`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._threads: SqliteDict | None = None
        self._viewers: SqliteDict | None = None
        # When each person last opened the Home tab, as stored: asked at every run's phase change, written
        # only here (this process owns its home), and one row per person, so it is read once at open.
        self._opened_at: dict[str, float] = {}

    async def open(self) -> None:
        def _open_all() -> tuple[SqliteDict, SqliteDict]:
            self.directory.mkdir(parents=True, exist_ok=True)
            return (
                open_table(self.directory / "threads.sqlite", "threads"),
                open_table(self.directory / "threads.sqlite", "home_viewers"),
            )

        self._threads, self._viewers = await asyncio.to_thread(_open_all)
        await asyncio.to_thread(self._index_owners)
        viewers = self._viewers
        self._opened_at = await asyncio.to_thread(lambda: {user: float(at) for user, at in viewers.items()})

    async def close(self) -> None:
        for db in (self._threads, self._viewers):
            if db is not None:
                await asyncio.to_thread(db.close)
        self._threads = self._viewers = None

    @property
    def threads(self) -> SqliteDict:
        if self._threads is None:
            raise RuntimeError("ThreadStore is not open")
        return self._threads

    @property
    def viewers(self) -> SqliteDict:
        if self._viewers is None:
            raise RuntimeError("ThreadStore is not open")
        return self._viewers

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

    async def home_opened(self, user: str) -> None:
        """`user` opened the Home tab now (bot.home.publish refreshes only people who look at it)."""
        now = time.time()
        await asyncio.to_thread(self.viewers.__setitem__, user, now)
        self._opened_at[user] = now

    async def home_viewer(self, user: str, since: float) -> bool:
        """True if `user` opened the Home tab at `since` (a time.time()) or later."""
        opened = self._opened_at.get(user)
        return opened is not None and opened >= since
