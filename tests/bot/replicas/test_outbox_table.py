"""The replicas' outbox against a real Postgres: a streamed reply's whole text, recorded by a replica that
then died, settles the event it answers even when a third replica (not the one taking the thread over)
finds the entry first and sends it, so the thread's next holder does not handle the event again."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.base.lease import HELD
from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.inbox.database_inbox import DatabaseInbox
from crewagent.bot.outbox.entry import OutboxEntry
from crewagent.bot.replicas.membership import Replicas
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
