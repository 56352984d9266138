"""The inbox in Postgres, shared by replicas: the same table and statements as the local file
(bot.inbox.records), run on the replica's psycopg pool. Only the lease holder of a thread takes its
rows, in order, and marks them done, each under the lease's epoch: once another replica took the
thread over, both are refused (LeaseLost), so the new holder handles the event again, once.

NOTIFY tells the others that a thread has new events (`crew_inbox`), and, with a control event,
every replica that a pumping run must be paused or stopped (`crew_control`); a redelivery already in
the inbox notifies nobody.

A row is also its event's dedupe claim (bot.inbox.records): claiming it is one statement, so two
replicas handed the same event cannot both win; work holding the thread's lease claims at its epoch
and takes over a claim of an older epoch that is not final (its holder lost the thread before the
event was done, and what it did was refused), so the event is handled again, once. Marking a row
done makes its claim final in the same statement.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ..base.event import REDELIVERY_WINDOW, ThreadEvent
from ..base.lease import HELD, Lease, LeaseLost
from ..base.thread import ThreadKey
from .records import (
    ALL_WAITING, CLAIMED_ROW_COLUMNS, MARK_DONE, POSTGRES, PRUNE, PRUNE_KEYS, THREAD_WAITING, Compiled, add_statement,
    claim_statements, claimed_row, compiled, inbox, inbox_keys, new_row, postgres_insert,
    postgres_keys_match, read_row,
)

INBOX_CHANNEL = "crew_inbox"
CONTROL_CHANNEL = "crew_control"
PUSH_TIMEOUT = 2.0  # seconds an event may wait for a connection before the caller keeps it locally

_leases = sa.table("crew_leases", sa.column("thread_key"), sa.column("epoch"))


class DatabaseInbox:
    def __init__(self, pool: AsyncConnectionPool, *, fence: str, redelivery_window: float = REDELIVERY_WINDOW) -> None:
        """`fence`: the SQL condition, with `{key}` and `{epoch}`, that holds while an epoch is still its
        thread's."""
        self.pool = pool
        self.redelivery_window = redelivery_window
        fenced = sa.text(fence.format(key=":fence_key", epoch=":fence_epoch"))
        queued = add_statement(postgres_insert).returning(inbox.c.thread_key).cte("queued")
        keyed = _keys_added()
        notify = sa.func.pg_notify(INBOX_CHANNEL, queued.c.thread_key)
        self._push = _for_postgres(sa.select(queued.c.seq, notify).add_cte(keyed))
        self._push_with_control = _for_postgres(
            sa.select(queued.c.seq, notify, sa.func.pg_notify(CONTROL_CHANNEL, sa.bindparam("control_signal")))
            .add_cte(keyed)
        )
        claimed = add_statement(postgres_insert, CLAIMED_ROW_COLUMNS).cte("claimed")
        self._add_claimed = _for_postgres(sa.select(claimed.c.seq).add_cte(keyed))
        self._claims = type(CLAIM_STATEMENTS)(*(_for_postgres(statement) for statement in CLAIM_STATEMENTS))
        first = (
            sa.select(inbox.c.seq, inbox.c.event)
            .where(inbox.c.thread_key == _leases.c.thread_key, inbox.c.done_at.is_(None))
            .order_by(inbox.c.seq).limit(1).lateral("waiting")
        )
        self._next = _for_postgres(
            sa.select(_leases.c.epoch == sa.bindparam("fence_epoch"), first.c.seq, first.c.event)
            .select_from(_leases.outerjoin(first, sa.true()))
            .where(_leases.c.thread_key == sa.bindparam("fence_key"))
        )
        self._done = _for_postgres(MARK_DONE.where(fenced).values(claim_epoch=sa.null()).returning(inbox.c.seq))
        self._waiting = _for_postgres(THREAD_WAITING)
        self._all_waiting = _for_postgres(ALL_WAITING)
        self._prune = _for_postgres(PRUNE)
        self._prune_keys = _for_postgres(PRUNE_KEYS)

    async def push(self, event: ThreadEvent, control: ThreadEvent | None = None) -> bool:
        """Queue the event behind the thread's earlier ones and wake whoever drives the thread (with
        `control`, tell every replica, this one too). One statement, one round trip (the ack waits for
        it). False when its delivery is in the inbox already: nothing is queued or signalled.
        psycopg.OperationalError (PoolTimeout included) when Postgres does not take it within PUSH_TIMEOUT."""
        args: dict[str, Any] = new_row(event, control, _jsonb)
        if control is not None:
            args["control_signal"] = control.model_dump_json()
        async with self.pool.connection(timeout=PUSH_TIMEOUT) as conn:
            push = self._push if control is None else self._push_with_control
            cur = await conn.execute(push.sql, push.args(args))
            return await cur.fetchone() is not None

    async def next_for(self, lease: Lease) -> tuple[int, ThreadEvent | None] | None:
        """The thread's oldest waiting event (None for an unreadable one); None when nothing waits.
        LeaseLost once the thread's epoch is no longer `lease`'s."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._next.sql, self._next.args({"fence_key": lease.thread, "fence_epoch": lease.epoch}))
            row = await cur.fetchone()
        if row is None or not row[0]:
            raise LeaseLost(lease.thread)
        if row[1] is None:
            return None
        queued = read_row(row[1], row[2], None)
        return (int(row[1]), None) if queued is None else (queued.seq, queued.event)

    async def done(self, lease: Lease, seq: int) -> None:
        """The event is handled: no longer waiting (kept for the redelivery window) and its dedupe claims
        settled for good (its row's claim is final), unless the thread passed to a newer epoch (LeaseLost:
        the new holder handles the event again)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._done.sql, self._done.args(
                {"done_seq": seq, "done_time": time.time(), "fence_key": lease.thread, "fence_epoch": lease.epoch}
            ))
            if await cur.fetchone() is None:
                raise LeaseLost(lease.thread)

    # ---- claims (bot.threads.event_claim.ClaimStore; the replica waits for the database around them) ----

    async def claim(self, event: ThreadEvent, *, final: bool = False) -> bool:
        """Decide the event's row, found by any of its keys: False when it was decided before (by any
        replica), unless that was under an older epoch of the thread and not final. `final`: no later
        holder of the thread handles it again. An event that never passed through the inbox gets a row
        now, done and claimed."""
        lease = HELD.get()
        held_thread, held_epoch = (lease.thread, lease.epoch) if lease is not None else (None, None)
        args = {
            "claim_keys": list(event.dedupe), "claim_time": time.time(), "held_thread": held_thread,
            "held_epoch": held_epoch, "claim_epoch": None if final else held_epoch,
        }
        claims = self._claims
        async with self.pool.connection() as conn:
            if await (await conn.execute(claims.claim.sql, claims.claim.args(args))).fetchall():
                return True
            if await (await conn.execute(claims.found.sql, claims.found.args(args))).fetchone() is not None:
                return False
            row = claimed_row(event, _jsonb, args["claim_epoch"])
            cur = await conn.execute(self._add_claimed.sql, self._add_claimed.args(row))
            return await cur.fetchone() is not None

    async def seen(self, keys: list[str]) -> bool:
        """True when the row of any of `keys` was decided (by any replica)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._claims.claimed.sql, self._claims.claimed.args({"claim_keys": keys}))
            return await cur.fetchone() is not None

    async def settle(self, keys: list[str]) -> None:
        """The rows of `keys` count as handled, for good (their effect is durable): their claims are final,
        so no later holder of their thread handles the event again."""
        settle = self._claims.settle
        async with self.pool.connection() as conn:
            await conn.execute(settle.sql, settle.args({"claim_keys": keys, "claim_time": time.time()}))

    async def has_waiting(self, key: ThreadKey) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._waiting.sql, self._waiting.args({"waiting_thread": str(key)}))
            return await cur.fetchone() is not None

    async def waiting_summary(self) -> tuple[int, float | None]:
        """How many events wait in the inbox, for every thread and replica, and when the oldest was queued
        (None when none waits): what an operator watches."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._all_waiting.sql, self._all_waiting.args({}))
            row = await cur.fetchone()
        return (int(row[0]), float(row[1]) if row[1] is not None else None) if row is not None else (0, None)

    async def prune(self) -> int:
        """Drop rows whose work is done and whose redelivery window has passed; a waiting row stays."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._prune.sql, self._prune.args({"done_before": time.time() - self.redelivery_window}))
            await conn.execute(self._prune_keys.sql, self._prune_keys.fixed)
            return cur.rowcount


CLAIM_STATEMENTS = claim_statements(postgres_keys_match())


def _keys_added() -> Any:
    """The row's keys, added in the statement that queues it (a duplicate's new keys too)."""
    listed = sa.select(
        sa.func.unnest(sa.bindparam("row_keys", type_=postgresql.ARRAY(sa.Text()))),
        sa.bindparam("delivery", type_=sa.Text()),
    )
    return (
        postgresql.insert(inbox_keys).from_select(["key", "delivery"], listed)
        .on_conflict_do_nothing(index_elements=[inbox_keys.c.key]).cte("keyed")
    )


def _for_postgres(statement: Any) -> Compiled:
    return compiled(statement, POSTGRES)


def _jsonb(event: ThreadEvent) -> Jsonb:
    return Jsonb(event.model_dump(mode="json"))
