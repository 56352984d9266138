"""Shared test setup: every test gets a private runtime home and a clean environment."""

from __future__ import annotations

import logging
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.postgres import PostgresServer, find_bindir
from tests.processes import Spawner

pytest_plugins = ("tests.gitrepos",)  # git_config / team_repo: real repositories with a bare remote

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

_LEAKY_ENV = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "CREWAGENT_MODEL",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_API_URL",
    "CREWAGENT_DATABASE_URL",
)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _LEAKY_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CREWAGENT_HOME", str(tmp_path / "crewagent-home"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh copy of the sample project, so runs can write artifacts freely."""
    dest = tmp_path / "project"
    shutil.copytree(EXAMPLES / "sample-project", dest)
    return dest


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One Postgres for the session (started on first use, stopped with its process group at the end)."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, postgres) are not installed; `.ci/run` installs them")
    server = PostgresServer.start(bindir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def database_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A fresh, empty database for one test."""
    name = postgres_server.create_database()
    try:
        yield postgres_server.url(name)
    finally:
        postgres_server.drop_database(name)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """A test that sets up the bot's logging (JSON on a captured stderr) must not leave it behind:
    later log lines would go to a closed stream."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture
async def spawn() -> AsyncIterator[Spawner]:
    """Start processes with `await spawn(argv..., **kwargs)`; their process groups are killed at teardown."""
    spawner = Spawner()
    try:
        yield spawner
    finally:
        await spawner.close()
