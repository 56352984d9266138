"""The Postgres side of a replicated deployment: connections, the run store, lease coordination.

Only a bot with a database imports this (and psycopg with it): a single process never loads them.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import NamedTuple

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from crewagent.core.api.stores import PostgresRuntimeStore, connection_settings

from ..base.event import ThreadEvent
from ..base.thread import ThreadKey
from ..outbox.courier import Courier
from ..outbox.entry import LedgerUnavailable
from ..outgoing import Post
from ..render import blocks
from ..slack_client import PacedWebClient
from ..slack_port import SlackPort
from .callbacks import Lanes
from .handover import NOT_HELD, Handover
from .membership import Replicas, waits_for_database
from .outbox_table import PostgresLedger
from .slots import GlobalSlots
from ..inbox.database_inbox import DatabaseInbox
from ..inbox.file_inbox import FileInbox
from .tables import FENCE_SQL, REPLICA_SCHEMA
from .threads import PostgresThreadStore

CONNECT_TIMEOUT = 10.0  # seconds a new pooled connection may take
REACHABLE_TIMEOUT = 2.0  # seconds the health check waits for the database to answer
SEND_FLUSH_TIMEOUT = 2.0  # seconds the outbox waits for run writes to reach Postgres before it tries later


class ReplicaParts(NamedTuple):
    """What a replicated bot shares through Postgres, beside the run store."""

    threads: PostgresThreadStore
    handover: Handover
    slots: GlobalSlots
    outbox: Courier
    claims: PatientClaims


class PatientClaims:
    """The inbox's dedupe claims (bot.threads.event_claim.ClaimStore) waiting while the database is away:
    the turn deciding an event pauses there and goes on when it is back."""

    def __init__(self, inbox: DatabaseInbox) -> None:
        self.inbox = inbox

    @waits_for_database
    async def claim(self, event: ThreadEvent, *, final: bool = False) -> bool:
        return await self.inbox.claim(event, final=final)

    @waits_for_database
    async def settle(self, keys: list[str]) -> None:
        await self.inbox.settle(keys)

    @waits_for_database
    async def seen(self, keys: list[str]) -> bool:
        return await self.inbox.seen(keys)



class SharedStore:
    """The Postgres side of a replicated deployment: connections, the run store, lease coordination."""

    def __init__(self, url: str, runtime: PostgresRuntimeStore, sync_pool: ConnectionPool, lease_seconds: float) -> None:
        self.url = url
        self.runtime = runtime
        self.sync_pool = sync_pool
        # Checked on the way out: after the database restarted, the connections it had are dead. A connection
        # whose peer went silent fails within about 15 s (connection_settings).
        self.pool = AsyncConnectionPool(
            url, min_size=1, max_size=12, kwargs=connection_settings(CONNECT_TIMEOUT), open=False,
            check=AsyncConnectionPool.check_connection,
        )
        self.replicas = Replicas(self.pool, url, lease_seconds=lease_seconds)
        self._probe: asyncio.Task[bool] | None = None  # the health check's query, while it runs

    @classmethod
    def connect(cls, database_url: str, home: Path | None, lease_seconds: float) -> SharedStore:
        """Check the URL and open the run store's pool. Raises CrewError for a bad or unreachable database."""
        # The pool logs each failed reconnect; the heartbeat says once that the database is away, and once back.
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        runtime = PostgresRuntimeStore.open(database_url, home, max_size=12, schema=REPLICA_SCHEMA)
        return cls(database_url, runtime, runtime.pool, lease_seconds)

    def parts(self, lanes: Lanes, io: SlackPort, max_runs: int) -> ReplicaParts:
        """The thread store, hand-over, model cap and outbox, wired to this store's pool and replica."""
        replicas = self.replicas
        ledger = PostgresLedger(self.pool, replicas)
        outbox = Courier(io.client, ledger, before_send=self.flush_before_send, adopt_every=replicas.lease_seconds)

        async def say(key: ThreadKey, text: str) -> None:
            """Straight to Slack: the outbox's store is the one away, and the line shows nothing of a run."""
            unheld = NOT_HELD.set(True)
            notice = Post(key.channel, key.thread_ts, blocks.notice(text), durable=False, shows_run=False, lease=None)
            try:  # a failure is logged by the port
                await io.send(notice)
            finally:
                NOT_HELD.reset(unheld)

        inbox = DatabaseInbox(self.pool, fence=FENCE_SQL)
        slack = self.runtime.home / "slack"
        away = FileInbox(slack / "away-inbox.sqlite", earlier=slack / "journal.sqlite")
        handover = Handover(replicas, self.runtime, lanes, inbox=inbox, away=away, say=say)
        if isinstance(io.client, PacedWebClient):
            io.client.before_call = handover.hold_while_cut_off
        threads = PostgresThreadStore(self.pool)
        return ReplicaParts(threads, handover, GlobalSlots(replicas, max_runs), outbox, PatientClaims(inbox))

    async def open(self) -> None:
        await self.pool.open(wait=True, timeout=10)

    async def flush(self) -> None:
        """Every run write so far is in Postgres (a thread hop only when some are still queued)."""
        if self.runtime.pending():
            await asyncio.to_thread(self.runtime.flush)

    async def flush_before_send(self) -> None:
        """Like `flush`, but a database that does not take the writes soon is an error (LedgerUnavailable):
        the outbox keeps the message and tries again, rather than show what the store has not got."""
        if self.runtime.pending() and not await asyncio.to_thread(self.runtime.flush, SEND_FLUSH_TIMEOUT):
            raise LedgerUnavailable("the database did not take the run's writes")

    async def reachable(self) -> bool:
        """Whether the database answers within REACHABLE_TIMEOUT. One probe at a time, left to finish on
        its own when late: cancelling a query on a frozen connection would itself wait for the database."""
        if self._probe is None or self._probe.done():
            self._probe = asyncio.create_task(self._answers(), name="database-probe")
        done, _ = await asyncio.wait({self._probe}, timeout=REACHABLE_TIMEOUT)
        return bool(done) and self._probe.result()

    async def _answers(self) -> bool:
        try:
            async with self.pool.connection(timeout=REACHABLE_TIMEOUT) as conn:
                await conn.execute("SELECT 1")
            return True
        except psycopg.Error:  # PoolTimeout included
            return False

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
        await self.pool.close()
        await asyncio.to_thread(self.runtime.close)
        self.sync_pool.close()

