"""The Postgres store and lease layer against a real Postgres: write-through of run files, rebuilding
a run folder elsewhere, atomic dedupe, leases that expire with their holder, the shared model cap,
and migrating an embedded store."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.outbox.entry import OutboxEntry
from crewagent.bot.inbox.database_inbox import DatabaseInbox
from crewagent.bot.inbox.file_inbox import FileInbox
from crewagent.bot.replicas.slots import GlobalSlots
from crewagent.bot.replicas.tables import FENCE_SQL, REPLICA_SCHEMA
from crewagent.bot.replicas.membership import Replicas
from crewagent.bot.base.thread import ThreadKey, ThreadRecord
from crewagent.bot.threads.store import ThreadStore
from crewagent.bot.replicas.threads import PostgresThreadStore
from crewagent.cli.main import main as cli_main
from crewagent.core.base.atomic import append_line, atomic_write_text
from crewagent.core.store.database import open_pool
from crewagent.core.base.errors import CrewError
from crewagent.core.base.events import RunPhase
from crewagent.core.package.loader import load_package
from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.files import RuntimeStore
from crewagent.core.store.postgres import PostgresRuntimeStore
from tests.support.paths import EXAMPLES
from tests.support.postgres import PostgresServer

pytestmark = pytest.mark.slow  # a real Postgres

KEY = ThreadKey("T1", "C1", "1700000000.000100")


def test_run_files_are_written_through_and_rebuilt_in_another_home(
    sync_pool: ConnectionPool, tmp_path: Path, project: Path
) -> None:
    here = PostgresRuntimeStore(sync_pool, tmp_path / "replica-a")
    elsewhere = PostgresRuntimeStore(sync_pool, tmp_path / "replica-b")
    try:
        package = load_package(EXAMPLES / "hello-branch", cache_dir=here.packages_dir)
        record = RunManager(here).create(package, None, None, project)
        state = here.state_dir(record) / "workflow.md"
        atomic_write_text(state, state.read_text() + "\n<!-- edited -->\n")
        log = here.conversation_log(record)
        append_line(log, b'{"role":"user","content":"one"}\n')
        append_line(log, b'{"role":"assistant","content":"two"}\n')
        assert here.flush()

        assert elsewhere.read_record(record.run_id) == record
        elsewhere.materialise(record)
        assert (elsewhere.state_dir(record) / "workflow.md").read_text() == state.read_text()
        assert elsewhere.conversation_log(record).read_bytes() == log.read_bytes()
        assert b"run.created" in elsewhere.execution_log(record).read_bytes()

        # A whole-file rewrite of a log replaces the lines appended before it.
        atomic_write_text(log, '{"role":"user","content":"compacted"}\n')
        assert here.flush()
        elsewhere.materialise(record)
        assert elsewhere.conversation_log(record).read_text() == '{"role":"user","content":"compacted"}\n'
        # Files outside run folders (packages, projects) stay local.
        assert not [r for r in _rels(sync_pool) if "packages" in r]
    finally:
        here.close()
        elsewhere.close()



def _rels(pool: ConnectionPool) -> list[str]:
    with pool.connection() as conn:
        return [r[0] for r in conn.execute("SELECT rel FROM crew_run_files").fetchall()]


def test_an_unreachable_database_is_a_clear_error() -> None:
    with pytest.raises(CrewError, match="Cannot use the Postgres database"):
        open_pool("postgresql://nobody@127.0.0.1:9/none", timeout=2)
    with pytest.raises(CrewError, match="must start with postgresql://"):
        open_pool("mysql://x")


def _message(keys: list[str]) -> ThreadEvent:
    return ThreadEvent(kind="text", thread=str(KEY), user="U1", text="hi", dedupe=keys)


async def test_a_delivery_is_claimed_once_across_replicas(async_pool: AsyncConnectionPool) -> None:
    one, two = DatabaseInbox(async_pool, fence=FENCE_SQL), DatabaseInbox(async_pool, fence=FENCE_SQL)
    event = _message(["ev:Ev1", "msg:C1:1.2"])
    results = await asyncio.gather(*(inbox.claim(event) for inbox in (one, two, one, two)))
    assert sorted(results) == [False, False, False, True]
    # The mention/message pair of one message: another event id, the same message key.
    assert await two.claim(_message(["ev:Ev2", "msg:C1:1.2"])) is False
    assert await one.claim(_message(["ev:Ev3", "msg:C1:9.9"])) is True


async def test_a_lease_is_held_by_one_replica_until_its_holder_stops_beating(async_pool: AsyncConnectionPool) -> None:
    a = Replicas(async_pool, "", lease_seconds=0.5, replica_id="a")
    b = Replicas(async_pool, "", lease_seconds=0.5, replica_id="b")
    async with async_pool.connection() as conn:
        await conn.execute("INSERT INTO crew_replicas (id) VALUES ('a'), ('b')")
    assert await a.acquire(KEY) == ((str(KEY), 1), None)
    assert (await b.acquire(KEY))[0] is None
    assert await a.acquire(KEY) == ((str(KEY), 1), "a")  # re-entrant for its holder, at the same epoch
    await a.release(KEY)
    assert await b.acquire(KEY) == ((str(KEY), 2), "a")  # b learns its copy of the run may be stale
    # b dies: it stops beating; a takes the thread over once b's heartbeat is older than the lease.
    async with async_pool.connection() as conn:
        await conn.execute("UPDATE crew_replicas SET heartbeat = now() WHERE id = 'a'")
    assert (await a.acquire(KEY))[0] is None
    await _until(lambda: a.acquire(KEY), lambda got: got[0], beat=a)
    assert (await b.acquire(KEY))[0] is None
    assert (await a.acquire(KEY))[0] == (str(KEY), 3)


async def _until(call, done, *, beat: Replicas, timeout: float = 20.0) -> None:  # type: ignore[no-untyped-def]
    """Retry `call` while keeping `beat` alive, until `done(result)` (lease expiry is time-based)."""
    async with asyncio.timeout(timeout):
        while True:
            async with beat.pool.connection() as conn:
                await conn.execute("UPDATE crew_replicas SET heartbeat = now() WHERE id = %s", (beat.id,))
            if done(await call()):
                return
            await asyncio.sleep(0.1)


async def test_threads_with_queued_events_or_a_running_run_and_no_live_driver_are_orphans(
    async_pool: AsyncConnectionPool, sync_pool: ConnectionPool, tmp_path: Path, project: Path
) -> None:
    from crewagent.bot.base.event import ThreadEvent

    a = Replicas(async_pool, "", lease_seconds=30, replica_id="a")
    inbox = DatabaseInbox(async_pool, fence=FENCE_SQL)
    async with async_pool.connection() as conn:
        await conn.execute("INSERT INTO crew_replicas (id) VALUES ('a')")
    await inbox.push(ThreadEvent(kind="text", thread=str(KEY), user="U1", text="hi"))
    assert await a.orphans() == [str(KEY)]
    lease = (await a.acquire(KEY))[0]
    assert lease is not None
    assert await a.orphans() == []
    seq, event = await inbox.next_for(lease)  # type: ignore[misc]
    assert event is not None and event.text == "hi"
    await inbox.done(lease, seq)
    assert await inbox.next_for(lease) is None
    await a.release(KEY)
    assert await a.orphans() == [], "a handled event, kept for the redelivery window, needs no driver"

    runtime = PostgresRuntimeStore(sync_pool, tmp_path / "home")
    try:
        package = load_package(EXAMPLES / "hello-branch", cache_dir=runtime.packages_dir)
        run = RunManager(runtime).create(package, None, None, project)
        record = ThreadRecord.new(KEY, owner="U1", binding="default")
        record.session.run_id = run.run_id
        await PostgresThreadStore(async_pool).put(record)
        assert runtime.flush()
        assert await a.orphans() == []
        run.phase = RunPhase.RUNNING
        runtime.save_record(run)
        assert runtime.read_record(run.run_id) == run  # read your own writes before they reach Postgres
        assert runtime.flush()
        assert await a.orphans() == [str(KEY)]
    finally:
        runtime.close()


async def test_the_model_cap_holds_across_replicas(async_pool: AsyncConnectionPool) -> None:
    async with async_pool.connection() as conn:
        await conn.execute("INSERT INTO crew_replicas (id) VALUES ('a'), ('b')")
    a = Replicas(async_pool, "", lease_seconds=30, replica_id="a")
    b = Replicas(async_pool, "", lease_seconds=30, replica_id="b")
    slots_a, slots_b = GlobalSlots(a, 2), GlobalSlots(b, 2)
    await slots_a.prepare()
    busy = 0
    peak = 0
    gate = asyncio.Event()

    async def work(slots: GlobalSlots) -> None:
        nonlocal busy, peak
        async with slots:
            busy += 1
            peak = max(peak, busy)
            await gate.wait()
            busy -= 1

    tasks = [asyncio.create_task(work(s)) for s in (slots_a, slots_b, slots_a, slots_b, slots_b)]
    async with asyncio.timeout(10):
        while busy < 2:
            await asyncio.sleep(0.01)
    assert slots_a.locked() or slots_b.locked()
    gate.set()
    await asyncio.wait_for(asyncio.gather(*tasks), 20)
    assert peak == 2


def test_migrate_copies_an_embedded_store_into_postgres(
    sync_pool: ConnectionPool, database_url: str, tmp_path: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "crewagent-home"  # the conftest's CREWAGENT_HOME
    embedded = RuntimeStore(home)
    package = load_package(EXAMPLES / "hello-branch", cache_dir=embedded.packages_dir)
    run = RunManager(embedded).create(package, None, None, project)
    append_line(embedded.conversation_log(run), b'{"role":"user","content":"hello"}\n')

    async def threads() -> None:
        store = ThreadStore(home / "slack")
        await store.open()
        record = ThreadRecord.new(KEY, owner="U1", binding="default")
        record.session.run_id = run.run_id
        await store.put(record)
        await store.close()
        kept = FileInbox(home / "slack" / "inbox.sqlite")
        handled = await kept.add(_text_event("Ev1", "1.5"))
        assert handled is not None
        await kept.done(None, handled)
        await kept.add(_text_event("Ev2", "1.6"))  # still waiting when the embedded bot stopped
        await kept.close()

    asyncio.run(threads())
    assert cli_main(["migrate", "--to", database_url]) == 0
    out = capsys.readouterr().out
    assert "Copied 1 run(s)" in out and "1 Slack thread(s)" in out and "2 inbox event(s)" in out
    assert cli_main(["migrate", "--to", database_url]) == 0  # again: updates, no duplicates

    replica = PostgresRuntimeStore(sync_pool, tmp_path / "replica")
    try:
        assert replica.read_record(run.run_id) == run
        replica.materialise(run)
        assert replica.conversation_log(run).read_bytes() == embedded.conversation_log(run).read_bytes()
        assert (replica.state_dir(run) / "workflow.md").read_text() == (
            embedded.state_dir(run) / "workflow.md"
        ).read_text()
    finally:
        replica.close()
    with sync_pool.connection() as conn:
        data = conn.execute("SELECT data FROM crew_threads").fetchone()
        assert data is not None and data[0]["session"]["run_id"] == run.run_id
        assert conn.execute("SELECT count(*), count(done_at) FROM crew_inbox").fetchone() == (2, 1)
        assert conn.execute("SELECT count(*) FROM crew_inbox_keys WHERE key LIKE 'ev:%'").fetchone() == (2,)
    assert json.loads(json.dumps(data[0]))["thread_ts"] == KEY.thread_ts


def _text_event(event_id: str, ts: str) -> ThreadEvent:
    return ThreadEvent(
        kind="text", thread=str(KEY), user="U1", text="hello", message_ts=ts,
        dedupe=[f"ev:{event_id}", f"msg:{KEY.channel}:{ts}"],
    )


def test_migrate_to_a_database_that_is_not_there_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["migrate", "--to", "postgresql://nobody@127.0.0.1:9/none"]) == 2
    assert "Cannot use the Postgres database" in capsys.readouterr().err


async def test_signals_arrive_again_after_the_listening_connection_drops(
    async_pool: AsyncConnectionPool, database_url: str
) -> None:
    from crewagent.bot.base.event import ThreadEvent

    a = Replicas(async_pool, database_url, lease_seconds=30, replica_id="a")
    received: asyncio.Queue[dict[str, object]] = asyncio.Queue()

    async def tick() -> None:
        return None

    inbox = DatabaseInbox(async_pool, fence=FENCE_SQL)
    await a.start(on_inbox=lambda key: None, on_control=received.put_nowait, on_tick=tick, on_lost=lambda: None)
    try:
        stop = ThreadEvent(kind="text", thread=str(KEY), user="U1", text="*stop")
        await inbox.push(stop, stop)
        assert (await asyncio.wait_for(received.get(), 20))["text"] == "*stop"
        async with async_pool.connection() as conn:  # what a Postgres restart or a network cut does to it
            cur = await conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%%' "
                "AND datname = current_database()"
            )
            assert await cur.fetchall() == [(True,)]
        async with asyncio.timeout(30):
            while True:
                await inbox.push(stop, stop)  # sent until the new connection listens (each a new event)
                try:
                    assert (await asyncio.wait_for(received.get(), 0.5))["text"] == "*stop"
                    break
                except TimeoutError:
                    continue
    finally:
        await a.stop()


def test_runs_show_reads_the_shared_database_and_lists_what_the_replicas_gave_up(
    sync_pool: ConnectionPool, database_url: str, tmp_path: Path, project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    replica = PostgresRuntimeStore(sync_pool, tmp_path / "replica")
    try:
        package = load_package(EXAMPLES / "hello-branch", cache_dir=replica.packages_dir)
        record = RunManager(replica).create(package, None, None, project)
        assert replica.flush()
    finally:
        replica.close()
    other = ThreadKey("T1", "C1", "1700000000.000900")
    with sync_pool.connection() as conn:
        conn.execute("INSERT INTO crew_threads (key, run_id, data) VALUES (%s, %s, %s)",
                     (str(KEY), record.run_id, Jsonb({"session": {"run_id": record.run_id}})))
        for key, text in ((KEY, "What is the topic?"), (other, "a message of another run")):
            entry = OutboxEntry(kind="post", channel=key.channel, thread_ts=key.thread_ts, payload={"text": text},
                                state="given_up", error="is_archived")
            conn.execute("INSERT INTO crew_outbox (id, state, entry, done_at) VALUES (%s, 'given_up', %s, %s)",
                         (entry.id, Jsonb(entry.model_dump(mode="json")), time.time()))

    assert cli_main(["runs", "list", "--database-url", database_url]) == 0
    assert record.run_id in capsys.readouterr().out
    assert cli_main(["runs", "show", record.run_id[:12], "--database-url", database_url]) == 0
    shown = capsys.readouterr().out
    assert f"Run:       {record.run_id}" in shown and "Progress:  " in shown  # its state was read
    assert "Not shown in Slack (is_archived): What is the topic?" in shown
    assert "another run" not in shown
    assert not RuntimeStore().read_index()  # read in a scratch folder, not in this machine's home

    assert cli_main(["runs", "list", "--database-url", "mysql://nobody@127.0.0.1/none"]) == 2
    assert "must start with postgresql://" in capsys.readouterr().err


def test_the_run_store_answers_at_once_after_the_database_restarted(
    own_postgres: PostgresServer, tmp_path: Path, project: Path
) -> None:
    """The pool's connections die with the server; the first read after a restart still gets its answer."""
    store = PostgresRuntimeStore.open(
        own_postgres.url(own_postgres.create_database()), tmp_path / "home", schema=REPLICA_SCHEMA
    )
    try:
        package = load_package(EXAMPLES / "hello-branch", cache_dir=store.packages_dir)
        record = RunManager(store).create(package, None, None, project)
        assert store.flush()
        with store.pool.connection() as conn:  # a connection the pool keeps for later
            conn.execute("SELECT 1")
        own_postgres.halt()
        own_postgres.resume()
        assert store.read_record(record.run_id) == record
    finally:
        store.close()
        store.pool.close()
