"""The heartbeat thread against a real Postgres: a replica whose event loop is busy stays live and keeps
its leases, one whose heartbeat cannot get through is told it lost them, and a stopped one leaves."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
from psycopg_pool import AsyncConnectionPool
import pytest

from crewagent.bot.replicas.heartbeat import HeartbeatThread
from crewagent.bot.replicas.membership import Replicas
from crewagent.bot.base.thread import ThreadKey

pytestmark = pytest.mark.slow  # a real Postgres and a blocked event loop

KEY = ThreadKey("T1", "C1", "1700000000.000100")
LEASE = 2.0  # beats every 0.5 s; the busy spell below is two and a half leases long
WAIT = 60.0


async def _idle() -> None:
    return None


def _alive_as_seen_by_others(url: str, replica: str, until: threading.Event, verdicts: list[bool]) -> None:
    """What another replica's lease check says about `replica`, sampled until `until` is set."""
    with psycopg.connect(url, autocommit=True) as conn:
        while not until.is_set():
            row = conn.execute(
                "SELECT heartbeat > now() - make_interval(secs => %s) FROM crew_replicas WHERE id = %s",
                (LEASE, replica),
            ).fetchone()
            verdicts.append(bool(row and row[0]))
            until.wait(0.1)


async def test_a_replica_whose_event_loop_is_busy_keeps_beating_and_keeps_its_threads(
    async_pool: AsyncConnectionPool, database_url: str
) -> None:
    a = Replicas(async_pool, database_url, lease_seconds=LEASE, replica_id="a")
    b = Replicas(async_pool, database_url, lease_seconds=LEASE, replica_id="b")
    await a.start(on_inbox=lambda key: None, on_control=lambda payload: None, on_tick=_idle, on_lost=lambda: None)
    try:
        assert await a.acquire(KEY) == ((str(KEY), 1), None)
        assert a._heartbeat is not None
        beats_before = a._heartbeat.beats
        done, verdicts = threading.Event(), []
        watcher = threading.Thread(target=_alive_as_seen_by_others, args=(database_url, "a", done, verdicts))
        watcher.start()
        try:
            spell_ends = time.monotonic() + LEASE * 2.5
            while time.monotonic() < spell_ends:  # the loop does nothing but CPU work: no await at all
                sum(range(10_000))
        finally:
            done.set()
            await asyncio.to_thread(watcher.join, WAIT)
        assert verdicts and all(verdicts), "another replica saw a busy replica as dead"
        assert a._heartbeat.beats > beats_before  # the beats went on while the loop was busy
        assert (await b.acquire(KEY))[0] is None  # so its thread was not taken over
    finally:
        await a.stop()


async def test_a_heartbeat_that_cannot_reach_postgres_reports_the_lease_lost() -> None:
    lost = asyncio.Event()
    beat = HeartbeatThread(
        "postgresql://nobody@127.0.0.1:9/none",  # nothing listens on the discard port
        "a",
        interval=0.05,
        lease_seconds=0.2,
        loop=asyncio.get_running_loop(),
        on_beat=lambda: None,
        on_lost=lost.set,
    )
    beat.start()
    try:
        await asyncio.wait_for(lost.wait(), WAIT)
        assert beat.beats == 0
    finally:
        await asyncio.to_thread(beat.stop)
    assert not beat._thread.is_alive()


async def test_a_stopped_replica_stops_beating_and_leaves_at_once(
    async_pool: AsyncConnectionPool, database_url: str
) -> None:
    a = Replicas(async_pool, database_url, lease_seconds=LEASE, replica_id="a")
    b = Replicas(async_pool, database_url, lease_seconds=LEASE, replica_id="b")
    ticked = asyncio.Event()

    async def tick() -> None:
        ticked.set()

    await a.start(on_inbox=lambda key: None, on_control=lambda payload: None, on_tick=tick, on_lost=lambda: None)
    heartbeat = a._heartbeat
    assert heartbeat is not None
    try:
        await asyncio.wait_for(ticked.wait(), WAIT)  # each beat is followed by a scan on the loop
        assert await a.acquire(KEY) == ((str(KEY), 1), None)
    finally:
        await a.stop()
    assert not heartbeat._thread.is_alive()
    assert await b.acquire(KEY) == ((str(KEY), 2), "a")  # handed over without waiting for the lease
    async with async_pool.connection() as conn:
        cur = await conn.execute("SELECT count(*) FROM crew_replicas WHERE id = 'a'")
        assert await cur.fetchone() == (0,)
