"""Thread records and handled deliveries in Postgres, shared by every replica (same API as ThreadStore).

Claiming a delivery is one statement, so two replicas handed the same Slack retry cannot both win.
While the database is away each call waits for it (the turn that needs it pauses there).
"""

from __future__ import annotations

import time
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ..base.thread import BRIEF_PATHS, ThreadBrief, ThreadKey, ThreadRecord
from ..base.lease import HELD, LeaseLost, held_for
from ..base.event import REDELIVERY_WINDOW
from .membership import waits_for_database
from .tables import FENCE_SQL


SETTLE_CLAIMS_SQL = "UPDATE crew_seen SET epoch = NULL WHERE key = ANY(%s)"
"""Makes the claims of an event's keys final (no later holder of the thread handles it again)."""


class PostgresThreadStore:
    def __init__(self, pool: AsyncConnectionPool, *, redelivery_window: float = REDELIVERY_WINDOW) -> None:
        self.pool = pool
        self.redelivery_window = redelivery_window

    async def open(self) -> None:
        await self.prune_seen()

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
    async def claim(self, keys: list[str], *, final: bool = False) -> bool:
        """Record `keys` as handled; False if any was already handled (by any replica).

        Work holding a thread's lease claims at its epoch, and takes over a claim made at an older one
        whose event was never marked done (`DatabaseInbox.done` or `settle` settles a claim): its holder lost the
        thread before finishing, and what it did was refused, so the event is handled again, once. A
        `final` claim (the event's effect is a run's, carried on by its resume) is settled when made."""
        now, lease = time.time(), HELD.get()
        thread, epoch = (lease.thread, lease.epoch) if lease is not None else (None, None)
        if final:
            epoch = None
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "INSERT INTO crew_seen (key, at, thread_key, epoch) SELECT k, %s, %s, %s FROM unnest(%s::text[]) AS k "
                "ON CONFLICT (key) DO UPDATE SET at = EXCLUDED.at, thread_key = EXCLUDED.thread_key, epoch = EXCLUDED.epoch "
                "WHERE crew_seen.thread_key = EXCLUDED.thread_key AND crew_seen.epoch < EXCLUDED.epoch "
                "RETURNING key",
                (now, thread, epoch, keys),
            )
            taken = await cur.fetchall()
        return len(taken) == len(set(keys))

    @waits_for_database
    async def settle(self, keys: list[str]) -> None:
        """The claims of `keys` are final: no later holder of their thread handles the event again."""
        async with self.pool.connection() as conn:
            await conn.execute(SETTLE_CLAIMS_SQL, (keys,))

    @waits_for_database
    async def seen(self, keys: list[str]) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT 1 FROM crew_seen WHERE key = ANY(%s) LIMIT 1", (keys,)
            )
            return await cur.fetchone() is not None

    @waits_for_database
    async def remember(self, keys: list[str]) -> None:
        now = time.time()
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO crew_seen (key, at) SELECT k, %s FROM unnest(%s::text[]) AS k "
                "ON CONFLICT (key) DO UPDATE SET at = EXCLUDED.at",
                (now, keys),
            )

    async def prune_seen(self, keep: frozenset[str] = frozenset()) -> int:
        """Forget claims older than the redelivery window whose work is settled and whose event no longer
        waits in the queue (`keep`: more keys to keep; the queue itself is looked at here)."""
        async with self.pool.connection() as conn:
            # Older than a redelivery could be, settled, and no queued event carries it.
            cur = await conn.execute(
                "DELETE FROM crew_seen s WHERE s.at < %s AND s.epoch IS NULL AND NOT EXISTS "
                "(SELECT 1 FROM crew_inbox i WHERE i.done_at IS NULL AND jsonb_exists(i.event->'dedupe', s.key)) "
                "AND NOT (s.key = ANY(%s))",
                (time.time() - self.redelivery_window, list(keep)),
            )
            return cur.rowcount
