"""The Postgres side of a replicated deployment: connections, the run store, lease coordination.

Only a bot with a database imports this (and psycopg with it): a single process never loads them.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from psycopg_pool import AsyncConnectionPool, ConnectionPool

from core.api.stores import check_url, open_pool, PostgresRuntimeStore

from .membership import Replicas
from .tables import REPLICA_SCHEMA


class SharedStore:
    """The Postgres side of a replicated deployment: connections, the run store, lease coordination."""

    def __init__(self, url: str, runtime: PostgresRuntimeStore, sync_pool: ConnectionPool, lease_seconds: float) -> None:
        self.url = url
        self.runtime = runtime
        self.sync_pool = sync_pool
        self.pool = AsyncConnectionPool(url, min_size=1, max_size=12, kwargs={"autocommit": True}, open=False)
        self.replicas = Replicas(self.pool, url, lease_seconds=lease_seconds)

    @classmethod
    def connect(cls, database_url: str, home: Path | None, lease_seconds: float) -> SharedStore:
        """Check the URL and open the run store's pool. Raises CrewError for a bad or unreachable database."""
        url = check_url(database_url)
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

