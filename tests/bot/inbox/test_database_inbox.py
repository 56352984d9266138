"""The inbox in Postgres: a redelivery queues nothing while its event waits or after it was handled,
rows are taken and marked done only under the thread's current epoch, and a handled row stays for
the redelivery window, never a waiting one."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.base.lease import Lease, LeaseLost
from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.inbox.database_inbox import DatabaseInbox
from crewagent.bot.replicas.tables import FENCE_SQL
from crewagent.bot.replicas.threads import SETTLE_CLAIMS_SQL

pytestmark = pytest.mark.slow  # a real Postgres

KEY = ThreadKey("T1", "C1", "1700000000.000100")


def message(text: str, ts: str, event_id: str) -> ThreadEvent:
    return ThreadEvent(
        kind="text", thread=str(KEY), user="U1", text=text, message_ts=ts, dedupe=[f"ev:{event_id}", f"msg:C1:{ts}"]
    )


def inbox_on(pool: AsyncConnectionPool, window: float = 3600.0) -> DatabaseInbox:
    return DatabaseInbox(pool, fence=FENCE_SQL, settle_claims=SETTLE_CLAIMS_SQL, redelivery_window=window)


async def lease_at(pool: AsyncConnectionPool, epoch: int) -> Lease:
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO crew_leases (thread_key, replica, epoch) VALUES (%s, 'a', %s) "
            "ON CONFLICT (thread_key) DO UPDATE SET epoch = EXCLUDED.epoch",
            (str(KEY), epoch),
        )
    return Lease(str(KEY), epoch)


async def rows(pool: AsyncConnectionPool) -> list[tuple[str, bool]]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT delivery, done_at IS NOT NULL FROM crew_inbox ORDER BY seq")
        return [(delivery, bool(done)) for delivery, done in await cur.fetchall()]


async def test_a_redelivered_message_is_queued_once_while_it_waits_and_after_it_was_handled(
    async_pool: AsyncConnectionPool,
) -> None:
    inbox = inbox_on(async_pool)
    lease = await lease_at(async_pool, 1)
    assert await inbox.push(message("hello", "1.1", "Ev1"))
    assert not await inbox.push(message("hello", "1.1", "Ev1")), "Slack's retry of the same delivery"
    assert not await inbox.push(message("<@UBOT> hello", "1.1", "Ev2")), "the app_mention of the same message"

    taken = await inbox.next_for(lease)
    assert taken is not None and taken[1] is not None and taken[1].text == "hello"
    await inbox.done(lease, taken[0])
    assert await inbox.next_for(lease) is None and not await inbox.has_waiting(KEY)
    assert not await inbox.push(message("hello", "1.1", "Ev1")), "handled, within the redelivery window"
    assert await inbox.next_for(lease) is None
    assert await rows(async_pool) == [("msg:C1:1.1", True)]


async def test_only_the_current_epoch_takes_a_row_or_marks_it_done(async_pool: AsyncConnectionPool) -> None:
    inbox = inbox_on(async_pool)
    old = await lease_at(async_pool, 1)
    assert await inbox.push(message("hello", "1.1", "Ev1"))
    taken = await inbox.next_for(old)
    assert taken is not None
    new = await lease_at(async_pool, 2)  # another replica took the thread over
    with pytest.raises(LeaseLost):
        await inbox.done(old, taken[0])
    with pytest.raises(LeaseLost):
        await inbox.next_for(old)
    again = await inbox.next_for(new)
    assert again is not None and again[0] == taken[0], "the new holder handles it again"
    await inbox.done(new, again[0])


async def test_a_handled_row_goes_once_its_window_passed_and_a_waiting_one_never_does(
    async_pool: AsyncConnectionPool,
) -> None:
    inbox = inbox_on(async_pool, window=0.0)
    lease = await lease_at(async_pool, 1)
    assert await inbox.push(message("handled", "1.1", "Ev1"))
    assert await inbox.push(message("waiting", "1.2", "Ev2"))
    taken = await inbox.next_for(lease)
    assert taken is not None
    await inbox.done(lease, taken[0])
    async with async_pool.connection() as conn:
        await conn.execute("UPDATE crew_inbox SET queued_at = queued_at - 7 * 3600")  # old, both
    assert await inbox.prune() == 1
    assert await rows(async_pool) == [("msg:C1:1.2", False)]
