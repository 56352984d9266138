"""How long replicas remember a handled Slack delivery (`crew_seen`): as long as a redelivery could
arrive, as long as its event waits in the queue, and as long as the work it guards is unsettled."""

from __future__ import annotations

import pytest
from psycopg_pool import AsyncConnectionPool

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.base.lease import HELD
from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.inbox.database_inbox import DatabaseInbox
from crewagent.bot.replicas.membership import Replicas
from crewagent.bot.replicas.tables import FENCE_SQL
from crewagent.bot.replicas.threads import SETTLE_CLAIMS_SQL, PostgresThreadStore

pytestmark = pytest.mark.slow  # a real Postgres

KEY = ThreadKey("T1", "C1", "1700000000.000200")


async def test_a_claim_is_kept_while_its_event_waits_or_its_work_is_unsettled_and_never_freed_by_age(
    async_pool: AsyncConnectionPool,
) -> None:
    store = PostgresThreadStore(async_pool, redelivery_window=3600)
    replica = Replicas(async_pool, "", lease_seconds=30, replica_id="a")
    async with async_pool.connection() as conn:
        await conn.execute("INSERT INTO crew_replicas (id) VALUES ('a')")
    lease, _ = await replica.acquire(KEY)
    held = HELD.set(lease)
    try:
        for key, final in (("ev:queued", True), ("ev:unsettled", False), ("ev:done", True), ("ev:recent", True)):
            assert await store.claim([key], final=final)
    finally:
        HELD.reset(held)
    await DatabaseInbox(async_pool, fence=FENCE_SQL, settle_claims=SETTLE_CLAIMS_SQL).push(ThreadEvent(kind="text", thread=str(KEY), user="U1", text="hi", dedupe=["ev:queued"]))
    async with async_pool.connection() as conn:
        await conn.execute(
            "UPDATE crew_seen SET at = at - 7 * 3600 WHERE key IN ('ev:queued', 'ev:unsettled', 'ev:done')"
        )
    assert not await store.claim(["ev:done"]), "age alone never frees a claim"
    assert await store.prune_seen() == 1
    for key in ("ev:queued", "ev:unsettled", "ev:recent"):
        assert await store.seen([key]), key
    assert not await store.seen(["ev:done"])
