"""The outbox of a replicated bot: `crew_outbox` in Postgres, so a replica that takes a thread over
(or starts after one died) sends what the other could not.

Each entry names the replica sending it; entries of a replica that stopped beating are taken over
by whoever looks next (`pending`). A streamed reply's record belongs to its thread, not to whoever
looks: only the replica taking the thread over (`take_thread`) settles it, before it runs the redo
that writes the whole reply into that message. A whole reply (`finish`) is not held back that way:
whoever sends it settles the event it answers when it ends the entry (`SETTLE_ENDED`). Errors that
mean "the database is away" become LedgerUnavailable: the outbox waits for it instead of failing a turn.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ..outbox.entry import LedgerUnavailable, OutboxEntry
from ..outbox.given_up import SHOWN_FOR, in_threads
from ..base.lease import HELD, Lease, LeaseLost, still_held
from .membership import LIVE_SQL, Replicas
from .tables import FENCE_SQL

CALL_TIMEOUT = 5.0  # seconds to wait for a connection
KEPT_VOUCHED = 4096  # entries vouched for at once, at most: one pushed out is claimed with a round trip instead
KEEP_GIVEN_UP = 7 * 24 * 3600.0
# The rows of the event a whole reply (`finish`) answers, found by any of its `settles` keys, count as
# handled for good (bot.inbox.records: claimed, no epoch): run in the statement that ends the entry (its
# `ended` CTE). The replica taking the thread over settles what is still pending (`take_thread`); an entry
# another replica found first (`pending`) and ended is no longer there for it, so it settles here.
SETTLE_ENDED = (
    "UPDATE crew_inbox SET claimed_at = COALESCE(claimed_at, %(now)s), claim_epoch = NULL "
    "WHERE delivery IN (SELECT delivery FROM crew_inbox_keys WHERE key IN "
    "(SELECT jsonb_array_elements_text(COALESCE(entry->'settles', '[]'::jsonb)) FROM ended))"
)


class PostgresLedger:
    def __init__(self, pool: AsyncConnectionPool, replicas: Replicas) -> None:
        self.pool = pool
        self.replicas = replicas
        # Entries recorded here under a lease, oldest first, until their first send or until they are no
        # longer this replica's to send (`_forget_vouches`); at most KEPT_VOUCHED.
        self._vouched: dict[str, Lease] = {}

    @property
    def vouched(self) -> int:
        """How many entries may go to Slack on their first send without asking the database."""
        return len(self._vouched)

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        try:
            async with self.pool.connection(timeout=CALL_TIMEOUT) as conn:
                yield conn
        except psycopg.OperationalError as exc:  # the server is away (PoolTimeout is one too)
            raise LedgerUnavailable(str(exc).splitlines()[0] if str(exc) else "database unreachable") from exc

    async def open(self) -> None:
        async with self._connection() as conn:
            await conn.execute(
                "DELETE FROM crew_outbox WHERE state = 'given_up' AND done_at < %s", (time.time() - KEEP_GIVEN_UP,)
            )

    async def close(self) -> None:
        """The pool belongs to the replica, which closes it."""

    async def add(self, entry: OutboxEntry) -> None:
        """Record the entry; one made by work holding its thread's lease names the epoch, and is refused
        (LeaseLost) once that is not the thread's epoch any more."""
        lease = HELD.get()
        fence = FENCE_SQL.format(key="%s", epoch="%s") if lease is not None else "true"
        thread, epoch = (lease.thread, lease.epoch) if lease is not None else (None, None)
        args: tuple[Any, ...] = (entry.id, self.replicas.id, Jsonb(entry.model_dump(mode="json")), thread, epoch)
        async with self._connection() as conn:
            cur = await conn.execute(
                "INSERT INTO crew_outbox (id, replica, entry, thread_key, epoch) SELECT %s, %s, %s, %s, %s WHERE "
                + fence + " RETURNING seq",
                args + ((thread, epoch) if lease is not None else ()),
            )
            row = await cur.fetchone()
        if row is None:
            raise LeaseLost(str(thread))
        entry.seq = int(row[0])
        if lease is not None:
            self._vouched[entry.id] = lease
            while len(self._vouched) > KEPT_VOUCHED:
                del self._vouched[next(iter(self._vouched))]

    async def replace(self, entry: OutboxEntry) -> None:
        """Rewrite the entry (an edit that replaces a waiting one, a streamed reply's whole text) while it is
        still this replica's, under an epoch its thread has not passed; otherwise LeaseLost, as `add`: a
        replica that lost the thread cannot overwrite what its new holder took over and sends."""
        async with self._connection() as conn:
            cur = await conn.execute(
                "UPDATE crew_outbox o SET entry = %(entry)s WHERE o.id = %(id)s AND o.replica = %(me)s "
                "AND (o.epoch IS NULL OR " + FENCE_SQL.format(key="o.thread_key", epoch="o.epoch") + ") "
                "RETURNING o.id",
                self.replicas.sql_args(id=entry.id, entry=Jsonb(entry.model_dump(mode="json"))),
            )
            if await cur.fetchone() is None:
                self._vouched.pop(entry.id, None)
                lease = HELD.get()
                raise LeaseLost(lease.thread if lease is not None else f"the thread of outbox entry {entry.id}")

    async def claim(self, entry_id: str) -> bool:
        """May the entry go to Slack now, from here? Not when another replica took it over (ours looked
        dead), nor when it was recorded under an epoch its thread has passed: then it stays recorded
        for the thread's new holder to send (`pending`), and nothing of ours reaches the thread.

        The first send of an entry recorded here, by the thread's work that still holds the lease it was
        recorded under, needs no second look: the insert was fenced by that epoch, and the epoch cannot
        have passed since unless this replica went silent for a whole lease, which makes it cut off
        (from half a lease on, until it has taken stock). That saves a round trip per message."""
        lease = self._vouched.pop(entry_id, None)
        if lease is not None and HELD.get() == lease and still_held(lease) and not self.replicas.cut_off:
            return True
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT EXISTS (SELECT 1 FROM crew_outbox o WHERE o.id = %(id)s AND o.replica = %(me)s "
                "AND (o.epoch IS NULL OR " + FENCE_SQL.format(key="o.thread_key", epoch="o.epoch") + "))",
                self.replicas.sql_args(id=entry_id),
            )
            row = await cur.fetchone()
        return bool(row and row[0])

    async def sent(self, entry_id: str) -> None:
        """Done; a whole reply's event is settled in the same statement (`SETTLE_ENDED`)."""
        self._vouched.pop(entry_id, None)
        async with self._connection() as conn:
            await conn.execute(
                "WITH ended AS (DELETE FROM crew_outbox WHERE id = %(id)s RETURNING entry) " + SETTLE_ENDED,
                {"id": entry_id, "now": time.time()},
            )

    async def give_up(self, entry_id: str, error: str) -> None:
        """Kept for the owner to see; a whole reply's event is settled as when it is sent: the reply was
        recorded whole, and its writer would have settled the event whatever Slack said."""
        self._vouched.pop(entry_id, None)
        async with self._connection() as conn:
            await conn.execute(
                "WITH ended AS (UPDATE crew_outbox SET state = 'given_up', done_at = %(now)s, "
                "entry = jsonb_set(jsonb_set(entry, '{state}', '\"given_up\"'), '{error}', to_jsonb(%(error)s::text)) "
                "WHERE id = %(id)s RETURNING entry) " + SETTLE_ENDED,
                {"id": entry_id, "now": time.time(), "error": error},
            )

    async def pending(self) -> list[OutboxEntry]:
        """Ours, those of replicas that stopped beating, and those recorded under an epoch their thread
        has passed (by a replica that lost it) once the thread's lease is ours, free or dead: taken over
        here under the thread's current epoch. What was recorded is sent once, by whoever holds it now.
        Never a thread's open stream: ours is being written, and another's is settled by whoever takes
        its thread over (`take_thread`), so the redo there finds it; settled here, it would be stopped
        under a live writer, or kept where no redo looks."""
        current = FENCE_SQL.format(key="o.thread_key", epoch="o.epoch")
        ours_or_free = ("EXISTS (SELECT 1 FROM crew_leases l WHERE l.thread_key = o.thread_key AND (l.replica = %(me)s "
                        "OR l.replica IS NULL OR NOT " + LIVE_SQL.format(col="l.replica") + "))")
        async with self._connection() as conn:
            cur = await conn.execute(
                "UPDATE crew_outbox o SET replica = %(me)s, epoch = CASE WHEN o.epoch IS NULL THEN NULL ELSE "
                "COALESCE((SELECT l.epoch FROM crew_leases l WHERE l.thread_key = o.thread_key), o.epoch) END "
                "WHERE o.state = 'pending' AND ("
                "(o.replica = %(me)s AND (o.epoch IS NULL OR " + current + ")) "
                "OR (o.replica IS DISTINCT FROM %(me)s AND ("
                "((o.replica IS NULL OR NOT " + LIVE_SQL.format(col="o.replica") + ") AND (o.epoch IS NULL OR "
                + current + ")) OR (o.epoch IS NOT NULL AND NOT " + current + " AND " + ours_or_free + "))))"
                " AND NOT (o.thread_key IS NOT NULL AND o.entry->>'kind' = 'stream')"
                " RETURNING seq, entry",
                self.replicas.sql_args(),
            )
            rows = await cur.fetchall()
            await self._forget_vouches(conn)
        return sorted((_entry(seq, data) for seq, data in rows), key=lambda e: e.seq)

    async def _forget_vouches(self, conn: psycopg.AsyncConnection[Any]) -> None:
        """Drop the vouch for every entry no longer ours to send at once: ended by another replica (a
        stream settled by the thread's new holder, a reply it sent or gave up), recorded under an epoch
        the thread has passed, or under a lease this replica no longer holds. Such an entry never comes
        back to `claim`, `sent` or `give_up` here, and would otherwise stay until the process ends.
        Run at every look for entries to take up (`pending`: once a lease time)."""
        for entry_id, lease in list(self._vouched.items()):
            if not still_held(lease):
                del self._vouched[entry_id]
        if not self._vouched:
            return
        asked = dict(self._vouched)
        cur = await conn.execute(
            "SELECT o.id, o.epoch FROM crew_outbox o JOIN crew_leases l ON l.thread_key = o.thread_key "
            "WHERE o.id = ANY(%(ids)s) AND o.state = 'pending' AND o.replica = %(me)s "
            "AND l.replica = %(me)s AND l.epoch = o.epoch",
            self.replicas.sql_args(ids=list(asked)),
        )
        ours = {str(entry_id): epoch for entry_id, epoch in await cur.fetchall()}
        for entry_id, lease in asked.items():
            if ours.get(entry_id) != lease.epoch and self._vouched.get(entry_id) == lease:
                del self._vouched[entry_id]

    async def take_thread(self, thread: str) -> list[OutboxEntry]:
        """The thread's lease is ours now (HELD, a newer epoch than its last writer's): every pending entry
        another holder recorded for it, or we recorded under an older epoch, becomes ours at the current
        epoch, its open streams too. Fenced by that epoch: nothing is taken once the thread passed on."""
        lease = HELD.get()
        if lease is None or lease.thread != thread:
            return []
        async with self._connection() as conn:
            cur = await conn.execute(
                "UPDATE crew_outbox o SET replica = %(me)s, epoch = l.epoch FROM crew_leases l "
                "WHERE o.thread_key = %(k)s AND l.thread_key = o.thread_key AND l.epoch = %(e)s "
                "AND o.state = 'pending' AND (o.replica IS DISTINCT FROM %(me)s OR o.epoch IS DISTINCT FROM l.epoch) "
                "RETURNING o.seq, o.entry",
                self.replicas.sql_args(k=thread, e=lease.epoch),
            )
            rows = await cur.fetchall()
        return sorted((_entry(seq, data) for seq, data in rows), key=lambda e: e.seq)

    async def given_up(self, since: float) -> list[OutboxEntry]:
        async with self._connection() as conn:
            cur = await conn.execute(
                "SELECT seq, entry FROM crew_outbox WHERE state = 'given_up' AND done_at >= %s ORDER BY seq", (since,)
            )
            rows = await cur.fetchall()
        return [_entry(seq, data) for seq, data in rows]


def _entry(seq: int, data: dict[str, Any]) -> OutboxEntry:
    return OutboxEntry.model_validate({**data, "seq": seq})


def given_up_in_database(pool: ConnectionPool, run_id: str) -> list[tuple[str, str]]:
    """(text, reason) of what the replicas gave up in the threads of run `run_id` this week (blocking:
    for `crewagent runs show --database-url`)."""
    with pool.connection(timeout=CALL_TIMEOUT) as conn:
        keys = {
            str(row[0])
            for row in conn.execute(
                "SELECT key FROM crew_threads WHERE run_id = %s OR data->'session'->>'last_run_id' = %s "
                "OR data->>'status_run_id' = %s",
                (run_id, run_id, run_id),
            )
        }
        if not keys:
            return []
        rows = conn.execute(
            "SELECT seq, entry FROM crew_outbox WHERE state = 'given_up' AND done_at >= %s ORDER BY seq",
            (time.time() - SHOWN_FOR,),
        ).fetchall()
    return in_threads([OutboxEntry.model_validate({**entry, "seq": seq}) for seq, entry in rows], keys)
