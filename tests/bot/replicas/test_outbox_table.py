"""The replicas' outbox against a real Postgres: a streamed reply's whole text, recorded by a replica that
then died, settles the event it answers even when a third replica (not the one taking the thread over)
finds the entry first and sends it, so the thread's next holder does not handle the event again; and an
entry that is no longer its writer's to send does not stay vouched for in the writer's memory."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.base.lease import HELD, LeaseLost
from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.inbox.database_inbox import DatabaseInbox
from crewagent.bot.outbox.entry import OutboxEntry
from crewagent.bot.replicas.membership import Replicas
from crewagent.bot.replicas import outbox_table
from crewagent.bot.replicas.outbox_table import PostgresLedger
from crewagent.bot.replicas.tables import FENCE_SQL

pytestmark = pytest.mark.slow  # a real Postgres

KEY = ThreadKey("T1", "C1", "1700000000.000100")
KEYS = ["ev:Ev1", "msg:C1:1700000000.000200"]


@pytest.mark.parametrize("outcome", ["sent", "given_up"])
async def test_a_whole_reply_sent_by_a_third_replica_settles_its_event_for_the_thread_s_next_holder(
    async_pool: AsyncConnectionPool, outcome: str
) -> None:
    inbox = DatabaseInbox(async_pool, fence=FENCE_SQL)
    a, b, c = (Replicas(async_pool, "", lease_seconds=30, replica_id=name) for name in "abc")
    async with async_pool.connection() as conn:
        await conn.execute("INSERT INTO crew_replicas (id, heartbeat) VALUES ('a', now()), ('b', now()), ('c', now())")
    old, _ = await a.acquire(KEY)
    assert old is not None
    question = ThreadEvent(kind="text", thread=str(KEY), user="U1", text="hi", dedupe=KEYS)
    assert await inbox.push(question)
    # A streams the reply and records its whole text (its event claimed with it), then dies before Slack has it.
    finish = OutboxEntry(kind="finish", channel=KEY.channel, thread_ts=KEY.thread_ts, target_ts="1700000000.000300",
                         payload={"rest": "the end"}, settles=KEYS)
    held = HELD.set(old)
    try:
        await PostgresLedger(async_pool, a).add(finish)
    finally:
        HELD.reset(held)
    async with async_pool.connection() as conn:
        await conn.execute("UPDATE crew_replicas SET heartbeat = now() - interval '1 minute' WHERE id = 'a'")
    # C, looking for what dead replicas left, finds the entry before B takes the thread over, and ends it.
    ledger_c = PostgresLedger(async_pool, c)
    assert [entry.id for entry in await ledger_c.pending()] == [finish.id]
    assert await ledger_c.claim(finish.id)
    if outcome == "sent":
        await ledger_c.sent(finish.id)
    else:
        await ledger_c.give_up(finish.id, "invalid_blocks")
    new, previous = await b.acquire(KEY)
    assert new is not None and previous == "a" and new.epoch > old.epoch
    held = HELD.set(new)
    try:
        assert await PostgresLedger(async_pool, b).take_thread(str(KEY)) == [], "nothing left for B to settle"
        assert await inbox.seen(KEYS), "the reply recorded whole counts its event as handled"
        assert not await inbox.claim(question), "B, the thread's new holder, does not handle the event again"
    finally:
        HELD.reset(held)


async def _replicas(async_pool: AsyncConnectionPool, *names: str) -> list[Replicas]:
    async with async_pool.connection() as conn:
        for name in names:
            await conn.execute("INSERT INTO crew_replicas (id, heartbeat) VALUES (%s, now())", (name,))
    return [Replicas(async_pool, "", lease_seconds=30, replica_id=name) for name in names]


async def _recorded_under(ledger: PostgresLedger, lease: object, kind: str = "stream") -> OutboxEntry:
    entry = OutboxEntry(kind=kind, channel=KEY.channel, thread_ts=KEY.thread_ts, target_ts="1700000000.000300",
                        payload={"text": "hi"} if kind == "post" else {})
    held = HELD.set(lease)  # type: ignore[arg-type]
    try:
        await ledger.add(entry)
    finally:
        HELD.reset(held)
    return entry


@pytest.mark.parametrize("then", ["settled by the new holder", "thread taken over", "lease handed back"])
async def test_an_entry_no_longer_this_replica_s_to_send_is_not_kept_vouched_for(
    async_pool: AsyncConnectionPool, then: str
) -> None:
    """A stream another replica settled never comes back to its writer's claim, sent or give_up: before,
    its vouch stayed in the writer's memory until the process ended."""
    a, b = await _replicas(async_pool, "a", "b")
    lease, _ = await a.acquire(KEY)
    assert lease is not None
    ledger_a = PostgresLedger(async_pool, a)
    stream = await _recorded_under(ledger_a, lease)
    await ledger_a.pending()  # A's regular look: the stream is A's, under the thread's current epoch
    assert ledger_a.vouched == 1
    if then == "lease handed back":
        await a.release(KEY)
    else:
        async with async_pool.connection() as conn:  # A falls silent; B takes the thread over
            await conn.execute("UPDATE crew_replicas SET heartbeat = now() - interval '1 minute' WHERE id = 'a'")
        new, _ = await b.acquire(KEY)
        assert new is not None and new.epoch > lease.epoch
        if then == "settled by the new holder":
            held = HELD.set(new)
            try:
                ledger_b = PostgresLedger(async_pool, b)
                assert [entry.id for entry in await ledger_b.take_thread(str(KEY))] == [stream.id]
                await ledger_b.sent(stream.id)
            finally:
                HELD.reset(held)
    await ledger_a.pending()
    assert ledger_a.vouched == 0


async def test_the_vouched_for_entries_are_bounded_and_one_pushed_out_is_claimed_from_the_database(
    async_pool: AsyncConnectionPool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(outbox_table, "KEPT_VOUCHED", 2)
    [a] = await _replicas(async_pool, "a")
    lease, _ = await a.acquire(KEY)
    ledger = PostgresLedger(async_pool, a)
    first, *_ = [await _recorded_under(ledger, lease, kind="post") for _ in range(3)]
    assert ledger.vouched == 2
    assert await ledger.claim(first.id), "still A's to send: the database says so"


async def test_a_replica_that_lost_the_thread_cannot_rewrite_an_entry_its_new_holder_took_over(
    async_pool: AsyncConnectionPool,
) -> None:
    """A cut-off replica finishing its reply after the takeover would overwrite the text the new holder
    sends (or, should that one die too, a third would send the old holder's text): the write is refused."""
    a, b = await _replicas(async_pool, "a", "b")
    old, _ = await a.acquire(KEY)
    assert old is not None
    ledger_a, ledger_b = PostgresLedger(async_pool, a), PostgresLedger(async_pool, b)
    stream = await _recorded_under(ledger_a, old)
    async with async_pool.connection() as conn:  # A falls silent; B takes the thread over, and the entry
        await conn.execute("UPDATE crew_replicas SET heartbeat = now() - interval '1 minute' WHERE id = 'a'")
    new, _ = await b.acquire(KEY)
    assert new is not None and new.epoch > old.epoch
    held = HELD.set(new)
    try:
        [taken] = await ledger_b.take_thread(str(KEY))
        taken.kind, taken.payload = "finish", {"rest": "the new holder's text"}
        await ledger_b.replace(taken)  # the thread's holder may rewrite it
    finally:
        HELD.reset(held)
    stream.kind, stream.payload = "finish", {"rest": "the old holder's text"}
    held = HELD.set(old)
    try:
        with pytest.raises(LeaseLost):
            await ledger_a.replace(stream)
    finally:
        HELD.reset(held)
    async with async_pool.connection() as conn:
        cur = await conn.execute("SELECT entry->'payload'->>'rest', replica FROM crew_outbox WHERE id = %s", (stream.id,))
        assert await cur.fetchone() == ("the new holder's text", "b")
