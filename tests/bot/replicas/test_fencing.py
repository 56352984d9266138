"""The thread lease's epoch against a real Postgres: once replica B took a thread over from A, every
write A still makes for the thread — its record, an outbox entry, taking an event out of the inbox,
the run's copy — is refused where it lands, and nothing A queued reaches Slack."""

from __future__ import annotations

from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.base.thread import ThreadKey, ThreadRecord
from crewagent.bot.outbox.courier import Courier
from crewagent.bot.base.lease import HELD, Lease, LeaseLost
from crewagent.bot.inbox.database_inbox import DatabaseInbox
from crewagent.bot.replicas.membership import Replicas
from crewagent.bot.replicas.outbox_table import PostgresLedger
from crewagent.bot.replicas.tables import FENCE_SQL
from crewagent.bot.replicas.threads import PostgresThreadStore
from crewagent.bot.slack_client import PacedWebClient
from crewagent.core.base.atomic import append_line
from crewagent.core.package.loader import load_package
from crewagent.core.store.fence import WRITE_FENCE, Fence
from crewagent.core.store.postgres import PostgresRuntimeStore, _Write
from crewagent.core.store.run_manager import RunManager
from tests.support.fakes import BOT_TOKEN, FakeSlack
from tests.support.paths import EXAMPLES
from tests.support.postgres import conversation_lines

pytestmark = pytest.mark.slow  # a real Postgres

KEY = ThreadKey("T1", "C1", "1700000000.000100")


def inbox_on(pool: AsyncConnectionPool) -> DatabaseInbox:
    return DatabaseInbox(pool, fence=FENCE_SQL)


async def test_the_old_holders_record_inbox_and_outbox_writes_are_refused_and_nothing_of_it_reaches_slack(
    async_pool: AsyncConnectionPool,
) -> None:
    async with FakeSlack() as slack:
        client = PacedWebClient(token=BOT_TOKEN, base_url=slack.api_url)
        a, old, new = await _taken_over_after_a_queued(async_pool)
        held = HELD.set(old)  # A's thread work goes on as if nothing happened
        try:
            with pytest.raises(LeaseLost):
                await PostgresThreadStore(async_pool).put(ThreadRecord.new(KEY, owner="U1", binding="default"))
            with pytest.raises(LeaseLost):
                await Courier(client, PostgresLedger(async_pool, a)).post(KEY.channel, KEY.thread_ts, {"text": "late"})
            with pytest.raises(LeaseLost):
                await inbox_on(async_pool).next_for(old)
            with pytest.raises(LeaseLost):
                await inbox_on(async_pool).done(old, 1)
        finally:
            HELD.reset(held)
        courier_a = Courier(client, PostgresLedger(async_pool, a))
        assert await courier_a.start() == 0  # A back in touch: its entry now belongs to the thread's new holder
        assert await courier_a.idle(30)
        await courier_a.close()
        assert not slack.calls_to("chat.postMessage"), "nothing of A's reaches Slack from A"
        async with async_pool.connection() as conn:
            cur = await conn.execute("SELECT count(*) FROM crew_inbox")
            assert (await cur.fetchone()) == (1,), "the event waits for B"
            cur = await conn.execute("SELECT count(*) FROM crew_outbox")
            assert (await cur.fetchone()) == (1,), "A's entry is kept: it was recorded while A held the thread"
        # B, holding the newer epoch, writes and sends as usual.
        held = HELD.set(new)
        try:
            b = Replicas(async_pool, "", lease_seconds=30, replica_id="b")
            await PostgresThreadStore(async_pool).put(ThreadRecord.new(KEY, owner="U1", binding="default"))
            seq, _ = await inbox_on(async_pool).next_for(new)  # type: ignore[misc]
            await inbox_on(async_pool).done(new, seq)
            assert await Courier(client, PostgresLedger(async_pool, b)).post(KEY.channel, KEY.thread_ts, {"text": "B"})
        finally:
            HELD.reset(held)
        # What A recorded while it held the thread is not lost: B, the thread's holder now, sends it once.
        courier_b = Courier(client, PostgresLedger(async_pool, b))
        assert await courier_b.start() == 1
        assert await courier_b.idle(30)
        await courier_b.close()
        texts = [call["text"] for call in slack.calls_to("chat.postMessage")]
        assert texts.count("queued before the takeover") == 1, texts


async def _taken_over_after_a_queued(pool: AsyncConnectionPool) -> tuple[Replicas, Lease, Lease]:
    """A holds the thread and records an outbox entry Slack has not taken yet; then A stops beating (cut
    off) and B takes the thread over: (A, A's lease, B's lease)."""
    a = Replicas(pool, "", lease_seconds=30, replica_id="a")
    b = Replicas(pool, "", lease_seconds=30, replica_id="b")
    async with pool.connection() as conn:
        await conn.execute("INSERT INTO crew_replicas (id, heartbeat) VALUES ('a', now()), ('b', now())")
    old, _ = await a.acquire(KEY)
    assert old is not None
    await inbox_on(pool).push(ThreadEvent(kind="text", thread=str(KEY), user="U1", text="hi"))
    held = HELD.set(old)
    try:
        slack_away = PacedWebClient(token=BOT_TOKEN, base_url="http://127.0.0.1:9/")  # nothing listens there
        queued = Courier(slack_away, PostgresLedger(pool, a))
        assert await queued.post(KEY.channel, KEY.thread_ts, {"text": "queued before the takeover"}) is None
        await queued.close()
    finally:
        HELD.reset(held)
    async with pool.connection() as conn:
        await conn.execute("UPDATE crew_replicas SET heartbeat = now() - interval '1 minute' WHERE id = 'a'")
    new, previous = await b.acquire(KEY)
    assert new is not None and previous == "a" and new.epoch == old.epoch + 1
    return a, old, new


async def test_the_old_holders_run_writes_are_not_copied_to_postgres(
    async_pool: AsyncConnectionPool, sync_pool: ConnectionPool, tmp_path: Path, project: Path
) -> None:
    _, old, new = await _taken_over_after_a_queued(async_pool)
    runtime = PostgresRuntimeStore(sync_pool, tmp_path / "home")
    try:
        package = load_package(EXAMPLES / "hello-branch", cache_dir=runtime.packages_dir)
        run = RunManager(runtime).create(package, None, None, project)
        for lease, line in ((old, b'{"by":"a"}\n'), (new, b'{"by":"b"}\n')):
            fenced = WRITE_FENCE.set(Fence(FENCE_SQL.format(key="%s", epoch="%s"), lease))
            try:
                append_line(runtime.conversation_log(run), line)
            finally:
                WRITE_FENCE.reset(fenced)
        assert runtime.flush()
        assert conversation_lines(sync_pool, run.run_id) == [b'{"by":"b"}\n']
    finally:
        runtime.close()


def test_a_batch_committed_again_writes_each_log_line_once(
    sync_pool: ConnectionPool, tmp_path: Path, project: Path
) -> None:
    """The writer commits a batch again when the answer to its commit was lost (the commit may have landed)."""
    runtime = PostgresRuntimeStore(sync_pool, tmp_path / "home")
    try:
        package = load_package(EXAMPLES / "hello-branch", cache_dir=runtime.packages_dir)
        run = RunManager(runtime).create(package, None, None, project)
        assert runtime.flush()
        batch = [_Write("line", run.run_id, "conversation.jsonl", f'{{"n":{n}}}\n'.encode()) for n in range(2)]
        runtime._commit(batch)
        runtime._commit(batch)  # the retry
        assert conversation_lines(sync_pool, run.run_id) == [b'{"n":0}\n', b'{"n":1}\n']
    finally:
        runtime.close()



async def test_an_event_the_old_holder_claimed_but_never_finished_is_handled_once_by_the_new_one(
    async_pool: AsyncConnectionPool,
) -> None:
    a, old, new = await _taken_over_after_a_queued(async_pool)
    inbox = inbox_on(async_pool)
    keys = ["ev:Ev1", "msg:C1:1.2"]
    answer = ThreadEvent(kind="text", thread=str(KEY), user="U1", text="answer", dedupe=keys)
    assert await inbox.push(answer)
    held = HELD.set(old)
    try:
        assert await inbox.claim(answer)  # A decides the event, then loses the thread before it is done
    finally:
        HELD.reset(held)
    # A took the event out but never marked it done; Slack's redelivery of it is not queued again.
    assert not await inbox.push(answer.model_copy(update={"text": "answer, delivered again by Slack"}))
    held = HELD.set(new)
    try:
        seq, _ = await inbox.next_for(new)  # type: ignore[misc]
        await inbox.done(new, seq)  # the event queued before (no dedupe keys)
        seq, event = await inbox.next_for(new)  # type: ignore[misc]
        assert event is not None and await inbox.claim(event), "B handles what A never finished"
        assert not await inbox.claim(event), "at B's own epoch the claim is B's"
        await inbox.done(new, seq)
        assert await inbox.next_for(new) is None, "the redelivery does nothing"
    finally:
        HELD.reset(held)
    # Done is for good: a later holder never handles it again.
    async with async_pool.connection() as conn:
        await conn.execute("UPDATE crew_replicas SET heartbeat = now() - interval '1 minute' WHERE id = 'b'")
        await conn.execute("UPDATE crew_replicas SET heartbeat = now() WHERE id = 'a'")
    newest, _ = await a.acquire(KEY)
    assert newest is not None and newest.epoch == new.epoch + 1
    held = HELD.set(newest)
    try:
        assert not await inbox.claim(answer)
    finally:
        HELD.reset(held)


async def test_a_claim_made_final_is_never_handled_again_and_a_lease_taken_back_by_its_last_holder_keeps_its_epoch(
    async_pool: AsyncConnectionPool,
) -> None:
    """A run's event (a click, an answer the run took) is claimed for good when decided: the run's resume,
    not the event, carries it on after a takeover. And a replica that let its lease go and takes it back
    with no one in between keeps its epoch, so what its work still sends under it is not fenced off."""
    a, old, new = await _taken_over_after_a_queued(async_pool)
    inbox = inbox_on(async_pool)
    click = ThreadEvent(kind="click", thread=str(KEY), user="U1", dedupe=["click:Ev9"])
    held = HELD.set(old)
    try:
        assert await inbox.claim(click, final=True)  # A decided a click for its run, then lost the thread
    finally:
        HELD.reset(held)
    held = HELD.set(new)
    try:
        assert not await inbox.claim(click), "the new holder's resume carries the run on; the click is not run again"
        assert await inbox.next_for(new) is not None  # only the event queued before: the click's row is done
    finally:
        HELD.reset(held)
    b = Replicas(async_pool, "", lease_seconds=30, replica_id="b")
    await b.release(KEY)
    again, previous = await b.acquire(KEY)
    assert again is not None and previous == "b" and again.epoch == new.epoch
