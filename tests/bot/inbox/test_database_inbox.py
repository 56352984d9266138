"""The inbox in Postgres: a redelivery queues nothing while its event waits or after it was handled,
rows are taken and marked done only under the thread's current epoch, and a handled row stays for
the redelivery window, never a waiting one."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.base.lease import HELD, Lease, LeaseLost
from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.inbox.database_inbox import DatabaseInbox
from crewagent.bot.replicas.tables import FENCE_SQL

pytestmark = pytest.mark.slow  # a real Postgres

KEY = ThreadKey("T1", "C1", "1700000000.000100")


def message(text: str, ts: str, event_id: str) -> ThreadEvent:
    return ThreadEvent(
        kind="text", thread=str(KEY), user="U1", text=text, message_ts=ts, dedupe=[f"ev:{event_id}", f"msg:C1:{ts}"]
    )


def inbox_on(pool: AsyncConnectionPool, window: float = 3600.0) -> DatabaseInbox:
    return DatabaseInbox(pool, fence=FENCE_SQL, redelivery_window=window)


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


async def claims(pool: AsyncConnectionPool) -> list[tuple[str, bool, int | None]]:
    """(delivery, claimed, claim epoch) of every row."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT delivery, claimed_at IS NOT NULL, claim_epoch FROM crew_inbox ORDER BY seq")
        return [(delivery, bool(claimed), epoch) for delivery, claimed, epoch in await cur.fetchall()]


async def test_a_claim_finds_its_row_by_any_key_of_the_message(async_pool: AsyncConnectionPool) -> None:
    inbox = inbox_on(async_pool)
    lease = await lease_at(async_pool, 1)
    assert await inbox.push(message("hello", "1.1", "Ev1"))
    assert not await inbox.push(message("<@UBOT> hello", "1.1", "Ev2"))  # its mention: one row, one more key
    assert not await inbox.seen(["ev:Ev2"]), "waiting is not decided"
    held = HELD.set(lease)
    try:
        mention_only = ThreadEvent(kind="text", thread=str(KEY), user="U1", text="hello", dedupe=["ev:Ev2"])
        assert await inbox.claim(mention_only), "the mention's own event id finds the message's row"
        assert not await inbox.claim(message("hello", "1.1", "Ev1")), "decided once, whichever key comes"
    finally:
        HELD.reset(held)
    assert await inbox.seen(["msg:C1:1.1"])
    assert await claims(async_pool) == [("msg:C1:1.1", True, 1)]


async def test_after_a_takeover_a_claim_of_the_older_epoch_is_taken_again_but_a_final_one_is_not(
    async_pool: AsyncConnectionPool,
) -> None:
    inbox = inbox_on(async_pool)
    answer, click = message("answer", "1.1", "Ev1"), message("*stop", "1.2", "Ev2")
    assert await inbox.push(answer) and await inbox.push(click)
    held = HELD.set(await lease_at(async_pool, 1))
    try:
        assert await inbox.claim(answer)  # decided, its reply not yet recorded
        assert await inbox.claim(click, final=True)  # carried on by the run from here
    finally:
        HELD.reset(held)
    held = HELD.set(await lease_at(async_pool, 2))  # another replica took the thread over
    try:
        assert await inbox.claim(answer), "the old holder never finished it: handled again, once"
        assert not await inbox.claim(answer)
        assert not await inbox.claim(click), "the run's resume carries the stop on, not the event"
    finally:
        HELD.reset(held)
    assert await claims(async_pool) == [("msg:C1:1.1", True, 2), ("msg:C1:1.2", True, None)]


async def test_a_claim_lives_while_its_row_waits_or_its_work_is_unsettled_and_goes_after_the_window(
    async_pool: AsyncConnectionPool,
) -> None:
    inbox = inbox_on(async_pool, window=0.0)
    lease = await lease_at(async_pool, 1)
    waiting, handled = message("waiting", "1.1", "Ev1"), message("handled", "1.2", "Ev2")
    unsettled = ThreadEvent(kind="click", thread=str(KEY), user="U1", dedupe=["click:Ev3"])
    assert await inbox.push(waiting) and await inbox.push(handled)
    held = HELD.set(lease)
    try:
        assert await inbox.claim(waiting) and await inbox.claim(handled)
        assert await inbox.claim(unsettled), "decided off the lane: a done row, its claim not final yet"
        taken = await inbox.next_for(lease)
        assert taken is not None and taken[1] is not None and taken[1].text == "waiting"
        await inbox.done(lease, (await _seq_of(async_pool, "msg:C1:1.2")))
    finally:
        HELD.reset(held)
    async with async_pool.connection() as conn:
        await conn.execute("UPDATE crew_inbox SET queued_at = queued_at - 7 * 3600, done_at = done_at - 7 * 3600")
    assert await inbox.prune() == 1
    assert await inbox.seen(["ev:Ev1"]) and await inbox.seen(["click:Ev3"])
    assert not await inbox.seen(["ev:Ev2"]) and not await inbox.seen(["msg:C1:1.2"])
    async with async_pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM crew_inbox_keys WHERE delivery = 'msg:C1:1.2'")
        assert await cur.fetchone() == (0,)
    await inbox.settle(["click:Ev3"])
    assert await inbox.prune() == 1, "settled: it goes after its window too"


async def _seq_of(pool: AsyncConnectionPool, delivery: str) -> int:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT seq FROM crew_inbox WHERE delivery = %s", (delivery,))
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])
