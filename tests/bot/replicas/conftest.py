"""Connection pools on a real Postgres (a fresh database per test) for the replica tests, and a Postgres of a
test's own to stop and start again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from urllib.parse import urlsplit

import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from crewagent.bot.replicas.tables import REPLICA_SCHEMA
from crewagent.core.store.database import open_pool
from tests.support.postgres import PostgresServer, running_server
from tests.support.tcp_proxy import TcpProxy


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


@pytest.fixture
def own_postgres() -> Iterator[PostgresServer]:
    """A Postgres of this test's own, to stop and start again without touching the other tests' server."""
    yield from running_server()


@pytest.fixture
def proxy(database_url: str) -> Iterator[TcpProxy]:
    """A proxy in front of the test database's server; closed with every connection through it."""
    port = urlsplit(database_url).port
    assert port is not None
    with TcpProxy(port) as running:
        yield running
