"""The Postgres side of a replicated deployment: connections, the run store, lease coordination.

Only a bot with a database imports this (and psycopg with it): a single process never loads them.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from core.api.stores import check_url, open_pool, PostgresRuntimeStore

from ..outbox.entry import LedgerUnavailable
from .membership import Replicas
from .tables import REPLICA_SCHEMA

SEND_FLUSH_TIMEOUT = 2.0  # seconds the outbox waits for run writes to reach Postgres before it tries later


class SharedStore:
    """The Postgres side of a replicated deployment: connections, the run store, lease coordination."""

    def __init__(self, url: str, runtime: PostgresRuntimeStore, sync_pool: ConnectionPool, lease_seconds: float) -> None:
        self.url = url
        self.runtime = runtime
        self.sync_pool = sync_pool
        # Checked on the way out: after the database restarted, the connections it had are dead.
        self.pool = AsyncConnectionPool(
            url, min_size=1, max_size=12, kwargs={"autocommit": True}, open=False,
            check=AsyncConnectionPool.check_connection,
        )
        self.replicas = Replicas(self.pool, url, lease_seconds=lease_seconds)

    @classmethod
    def connect(cls, database_url: str, home: Path | None, lease_seconds: float) -> SharedStore:
        """Check the URL and open the run store's pool. Raises CrewError for a bad or unreachable database."""
        url = check_url(database_url)
        # The pool logs each failed reconnect; the heartbeat says once that the database is away, and once back.
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
        sync_pool = open_pool(url, max_size=12, schema=REPLICA_SCHEMA)
        try:
            runtime = PostgresRuntimeStore(sync_pool, home)
        except BaseException:
            sync_pool.close()
            raise
        return cls(url, runtime, sync_pool, lease_seconds)

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
        try:
            async with self.pool.connection(timeout=2) as conn:
                await conn.execute("SELECT 1")
            return True
        except Exception:
            return False

    async def close(self) -> None:
        await self.pool.close()
        await asyncio.to_thread(self.runtime.close)
        self.sync_pool.close()

