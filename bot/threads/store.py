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
from collections.abc import Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel
from sqlitedict import SqliteDict

from core.api.events import RunPhase
from core.api.sessions import Session


class ThreadKey(NamedTuple):
    """(team, channel, thread_ts): one Slack thread, one session."""

    team: str
    channel: str
    thread_ts: str

    def __str__(self) -> str:
        return f"{self.team}:{self.channel}:{self.thread_ts}"

    @classmethod
    def parse(cls, text: str) -> ThreadKey | None:
        parts = text.split(":")
        if len(parts) != 3 or not all(parts):
            return None
        return cls(*parts)

    @property
    def session_id(self) -> str:
        return f"slack:{self}"

    @property
    def is_dm(self) -> bool:
        return self.channel.startswith("D")


class ThreadRecord(BaseModel):
    """What the bot keeps per thread: the surface-neutral Session plus Slack message bookkeeping."""

    team: str
    channel: str
    thread_ts: str
    binding: str = "default"  # which channel binding (project + packages) serves this thread
    session: Session
    epoch: int = 0  # bumped whenever a new agent picker / menu / clarify message supersedes older ones
    status_ts: str | None = None  # the run status message, updated in place
    status_run_id: str | None = None
    last_phase: RunPhase | None = None  # of status_run_id, to post the completion message once per completion

    @property
    def key(self) -> ThreadKey:
        return ThreadKey(self.team, self.channel, self.thread_ts)

    @classmethod
    def new(cls, key: ThreadKey, owner: str, binding: str) -> ThreadRecord:
        return cls(
            team=key.team,
            channel=key.channel,
            thread_ts=key.thread_ts,
            binding=binding,
            session=Session(id=key.session_id, owner=owner),
        )


class ThreadBrief(NamedTuple):
    """What a run overview needs of one thread, read without validating its whole session (histories are long)."""

    key: ThreadKey
    binding: str
    owner: str | None
    session_id: str
    run_ids: tuple[str, ...]  # the current run, the last one, the status message's
    widget_run_id: str | None  # the run the pending question belongs to
    widget_message: str | None  # that question's text

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ThreadBrief | None:
        """From (key, binding, owner, session id, run id, last run id, status run id, widget run, widget text)."""
        key = ThreadKey.parse(str(row[0]))
        if key is None:
            return None
        runs = tuple(dict.fromkeys(str(r) for r in row[4:7] if r))
        text = str(row[8]) if row[8] else None
        return cls(key, str(row[1] or "default"), row[2], str(row[3] or key.session_id), runs, row[7], text)


# The fields of a ThreadBrief, as JSON paths into a stored ThreadRecord (both stores query them).
BRIEF_PATHS = (
    "binding", "session.owner", "session.id", "session.run_id", "session.last_run_id", "status_run_id",
    "session.pending_widget.run_id", "session.pending_widget.payload.message",
)
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

    def __init__(self, directory: Path, *, seen_ttl: float = 6 * 3600) -> None:
        self.directory = directory
        self.seen_ttl = seen_ttl
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
        await self.prune_seen()

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
        """True if any of `keys` was handled within the TTL (a redelivery, possibly from before a restart)."""

        def check() -> bool:
            now = time.time()
            return any(now - float(self.seen_db.get(k, 0)) < self.seen_ttl for k in keys)

        return await asyncio.to_thread(check)

    async def claim(self, keys: list[str]) -> bool:
        """Record `keys` as handled; False if any was already handled within the TTL."""

        def check_and_mark() -> bool:
            now = time.time()
            if any(now - float(self.seen_db.get(k, 0)) < self.seen_ttl for k in keys):
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

    async def prune_seen(self) -> int:
        def prune() -> int:
            cutoff = time.time() - self.seen_ttl
            old = [k for k, t in self.seen_db.items() if float(t) < cutoff]
            for k in old:
                del self.seen_db[k]
            return len(old)

        return await asyncio.to_thread(prune)
