"""Connection pools on a real Postgres (a fresh database per test, the replica schema created) for the
tests of what replicas share: the replica tables and the inbox."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from crewagent.bot.replicas.tables import REPLICA_SCHEMA
from crewagent.core.store.database import open_pool


@pytest.fixture
def sync_pool(database_url: str) -> Iterator[ConnectionPool]:
    """A connection pool on a fresh database with the replica schema created."""
    pool = open_pool(database_url, schema=REPLICA_SCHEMA)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
async def async_pool(database_url: str, sync_pool: ConnectionPool) -> AsyncIterator[AsyncConnectionPool]:
    """An async pool on the same database, opened after the schema exists."""
    pool = AsyncConnectionPool(database_url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False)
    await pool.open(wait=True)
    try:
        yield pool
    finally:
        await pool.close()
