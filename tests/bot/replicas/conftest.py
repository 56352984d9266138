"""For the replica tests: a Postgres of a test's own to stop and start again, and a proxy in front of
the shared one (the pools on a fresh database are in tests/bot/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.support.postgres import PostgresServer, running_server
from tests.support.tcp_proxy import TcpProxy


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
