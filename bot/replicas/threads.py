"""Thread records and Home tab viewers in Postgres, shared by every replica (same API as ThreadStore).
Handled deliveries are the inbox's claims (bot.inbox.database_inbox); the `crew_seen` table an earlier
version kept is left in place, unused. While the database is away each call waits for it (the turn
that needs it pauses there).
"""

from __future__ import annotations

import time
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ..base.thread import BRIEF_PATHS, ThreadBrief, ThreadKey, ThreadRecord
from ..base.lease import LeaseLost, held_for
from .membership import waits_for_database
from .tables import FENCE_SQL


class PostgresThreadStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def open(self) -> None:
        """The pool is opened by the replica."""

    async def close(self) -> None:
        """The pool belongs to the replica, which closes it."""

    @waits_for_database
    async def get(self, key: ThreadKey) -> ThreadRecord | None:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT data FROM crew_threads WHERE key = %s", (str(key),))
            row = await cur.fetchone()
        return ThreadRecord.model_validate(row[0]) if row is not None else None

    @waits_for_database
    async def put(self, record: ThreadRecord) -> None:
        """Store the record. Work holding the thread's lease stores it only while its epoch is the
        thread's (LeaseLost otherwise: another replica took the thread over and its record is newer)."""
        thread = str(record.key)
        lease = held_for(thread)
        fence = FENCE_SQL.format(key="%s", epoch="%s") if lease is not None else "true"
        args: tuple[Any, ...] = (thread, record.session.run_id, Jsonb(record.model_dump(mode="json")))
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO crew_threads (key, run_id, data) SELECT %s, %s, %s WHERE " + fence
                + " ON CONFLICT (key) DO UPDATE SET run_id = EXCLUDED.run_id, data = EXCLUDED.data",
                args + ((thread, lease.epoch) if lease is not None else ()),
            )
        if cur.rowcount == 0:
            raise LeaseLost(thread)

    @waits_for_database
    async def all(self) -> list[ThreadRecord]:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT data FROM crew_threads")
            rows = await cur.fetchall()
        return [ThreadRecord.model_validate(row[0]) for row in rows]

    @waits_for_database
    async def briefs(self, owner: str | None) -> list[ThreadBrief]:
        """The threads `owner` owns (indexed on the session's owner), or every thread for None."""
        columns = ", ".join("data #>> %s" for _ in BRIEF_PATHS)
        args: list[Any] = [path.split(".") for path in BRIEF_PATHS]
        query = f"SELECT key, {columns} FROM crew_threads"
        if owner is not None:
            query += " WHERE data->'session'->>'owner' = %s"
            args.append(owner)
        async with self.pool.connection() as conn:
            cur = await conn.execute(query, args)
            rows = await cur.fetchall()
        return [brief for brief in map(ThreadBrief.from_row, rows) if brief is not None]

    @waits_for_database
    async def count(self) -> int:
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) FROM crew_threads")
            row = await cur.fetchone()
        return int(row[0]) if row else 0

    @waits_for_database
    async def home_opened(self, user: str) -> None:
        """`user` opened the Home tab now (bot.home.publish refreshes only people who look at it)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO crew_home_viewers (person, at) VALUES (%s, %s) ON CONFLICT (person) DO UPDATE SET at = EXCLUDED.at",
                (user, time.time()),
            )

    @waits_for_database
    async def home_viewer(self, user: str, since: float) -> bool:
        """True if `user` opened the Home tab at `since` (a time.time()) or later, at any replica."""
        async with self.pool.connection() as conn:
            cur = await conn.execute("SELECT 1 FROM crew_home_viewers WHERE person = %s AND at >= %s", (user, since))
            return await cur.fetchone() is not None
