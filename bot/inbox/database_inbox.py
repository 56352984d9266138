"""The inbox in Postgres, shared by replicas: the same table and statements as the local file
(bot.inbox.records), run on the replica's psycopg pool. Only the lease holder of a thread takes its
rows, in order, and marks them done, each under the lease's epoch: once another replica took the
thread over, both are refused (LeaseLost), so the new holder handles the event again, once.

NOTIFY tells the others that a thread has new events (`crew_inbox`), and, with a control event,
every replica that a pumping run must be paused or stopped (`crew_control`); a redelivery already in
the inbox notifies nobody.
"""

from __future__ import annotations

import time
from typing import Any

import sqlalchemy as sa
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from ..base.event import REDELIVERY_WINDOW, ThreadEvent
from ..base.lease import Lease, LeaseLost
from ..base.thread import ThreadKey
from .records import (
    MARK_DONE, POSTGRES, PRUNE, THREAD_WAITING, Compiled, add_statement, compiled, inbox, new_row, postgres_insert,
    read_row,
)

INBOX_CHANNEL = "crew_inbox"
CONTROL_CHANNEL = "crew_control"
PUSH_TIMEOUT = 2.0  # seconds an event may wait for a connection before the caller keeps it locally

_leases = sa.table("crew_leases", sa.column("thread_key"), sa.column("epoch"))


class DatabaseInbox:
    def __init__(
        self, pool: AsyncConnectionPool, *, fence: str, settle_claims: str, redelivery_window: float = REDELIVERY_WINDOW
    ) -> None:
        """`fence`: the SQL condition, with `{key}` and `{epoch}`, that holds while an epoch is still its
        thread's; `settle_claims`: the statement (one parameter, the keys) that makes an event's dedupe
        claims final once it is done, in the same transaction."""
        self.pool = pool
        self.redelivery_window = redelivery_window
        self._settle_claims = settle_claims
        fenced = sa.text(fence.format(key=":fence_key", epoch=":fence_epoch"))
        queued = add_statement(postgres_insert).returning(inbox.c.thread_key).cte("queued")
        notify = sa.func.pg_notify(INBOX_CHANNEL, queued.c.thread_key)
        self._push = _for_postgres(sa.select(queued.c.seq, notify))
        self._push_with_control = _for_postgres(
            sa.select(queued.c.seq, notify, sa.func.pg_notify(CONTROL_CHANNEL, sa.bindparam("control_signal")))
        )
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
        self._done = _for_postgres(MARK_DONE.where(fenced).returning(inbox.c.event))
        self._waiting = _for_postgres(THREAD_WAITING)
        self._prune = _for_postgres(PRUNE)

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
        settled for good, unless the thread passed to a newer epoch (LeaseLost: the new holder handles
        the event again)."""
        async with self.pool.connection() as conn, conn.transaction():
            cur = await conn.execute(self._done.sql, self._done.args(
                {"done_seq": seq, "done_time": time.time(), "fence_key": lease.thread, "fence_epoch": lease.epoch}
            ))
            row = await cur.fetchone()
            if row is None:
                raise LeaseLost(lease.thread)
            keys = row[0].get("dedupe") if isinstance(row[0], dict) else None
            if keys:
                await conn.execute(self._settle_claims, (list(keys),))

    async def has_waiting(self, key: ThreadKey) -> bool:
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._waiting.sql, self._waiting.args({"waiting_thread": str(key)}))
            return await cur.fetchone() is not None

    async def prune(self) -> int:
        """Drop rows whose work is done and whose redelivery window has passed; a waiting row stays."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(self._prune.sql, self._prune.args({"done_before": time.time() - self.redelivery_window}))
            return cur.rowcount


def _for_postgres(statement: Any) -> Compiled:
    return compiled(statement, POSTGRES)


def _jsonb(event: ThreadEvent) -> Jsonb:
    return Jsonb(event.model_dump(mode="json"))
