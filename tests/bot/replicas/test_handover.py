"""Events a replica took while its database was away wait in its away-inbox and are forwarded when
the database is back; a forward repeated after a crash (forwarded, not yet marked done locally)
queues nothing twice."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.inbox.database_inbox import DatabaseInbox
from crewagent.bot.inbox.file_inbox import FileInbox
from crewagent.bot.replicas.handover import Handover
from crewagent.bot.replicas.membership import Replicas
from crewagent.bot.replicas.tables import FENCE_SQL
from crewagent.bot.threads.thread_worker import ThreadLanes
from crewagent.core.store.postgres import PostgresRuntimeStore

pytestmark = pytest.mark.slow  # a real Postgres

KEY = ThreadKey("T1", "C1", "1700000000.000100")


def handover(pool: AsyncConnectionPool, runtime: PostgresRuntimeStore, away: FileInbox) -> Handover:
    lanes = ThreadLanes()
    lanes.accepting = False  # nothing drives the threads here: the test reads the inbox itself
    inbox = DatabaseInbox(pool, fence=FENCE_SQL)
    return Handover(Replicas(pool, "", lease_seconds=30, replica_id="a"), runtime, lanes, inbox=inbox, away=away)


async def test_a_forward_repeated_after_a_crash_queues_each_event_once(
    async_pool: AsyncConnectionPool, sync_pool: ConnectionPool, tmp_path: Path
) -> None:
    path = tmp_path / "slack" / "away-inbox.sqlite"
    runtime = PostgresRuntimeStore(sync_pool, tmp_path / "home")
    away = FileInbox(path)
    for n in range(3):
        await away.add(ThreadEvent(kind="text", thread=str(KEY), user="U1", text=f"reply {n}", dedupe=[f"msg:C1:1.{n}"]))
    await handover(async_pool, runtime, away).forward()
    assert await away.waiting() == []
    await away.close()

    with closing(sqlite3.connect(path)) as db, db:  # the process died before it marked them forwarded
        db.execute("UPDATE crew_inbox SET done_at = NULL")
    again = FileInbox(path)
    await handover(async_pool, runtime, again).forward()
    assert await again.waiting() == []
    await again.close()
    async with async_pool.connection() as conn:
        cur = await conn.execute("SELECT event->>'text' FROM crew_inbox WHERE done_at IS NULL ORDER BY seq")
        assert [row[0] for row in await cur.fetchall()] == ["reply 0", "reply 1", "reply 2"]
