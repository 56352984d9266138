"""Shared test setup: every test gets a private runtime home and a clean environment."""

from __future__ import annotations

import asyncio
import faulthandler
import logging
import os
import shutil
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from types import FrameType
from pathlib import Path

import pytest

from tests.support.postgres import PostgresServer, running_server
from tests.support.paths import EXAMPLES
from tests.support.processes import Spawner

pytest_plugins = ("tests.support.gitrepos",)  # git_config / team_repo: real repositories with a bare remote

TEST_TIME_LIMIT = float(os.environ.get("CREWAGENT_TEST_TIME_LIMIT", "240"))
"""Seconds one test (set-up and teardown included) may take before it fails. Every wait in the
tests is bounded on its own (30 s or less); this guard catches a wait someone forgot to bound."""

_LEAKY_ENV = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "CREWAGENT_MODEL",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_API_URL",
    "CREWAGENT_DATABASE_URL",
    "CREWAGENT_PROJECT",  # serve's default project and config file (the Docker image sets them)
    "CREWAGENT_CONFIG",
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
    yield from running_server()


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


def _dump_asyncio_tasks() -> None:
    """Where every task of the running loop is waiting (a hung test waits on one of them)."""
    loop = asyncio._get_running_loop()
    if loop is None:
        return
    for task in asyncio.all_tasks(loop):
        print(f"--- {task!r}", file=sys.stderr)
        task.print_stack(limit=8, file=sys.stderr)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--all", action="store_true",
        help="also run the slow tests (real Slack and database outages, kill -9, replicas, the terminal end to end)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A bare `pytest` runs the quick tests, so a first run takes minutes; the slow ones run with `--all`
    (CI) or when named (a file, a folder, `-k`, `-m`)."""
    named = config.args_source != pytest.Config.ArgsSource.TESTPATHS or config.option.keyword or config.option.markexpr
    if config.getoption("--all") or named:
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM (CI's time-out, `kill`) stops the run like Ctrl-C does, so fixture teardown still ends
    every server and process group the tests started instead of leaving them running."""

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)


@pytest.fixture(autouse=True)
def _time_limit(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that runs past TEST_TIME_LIMIT with its name, its asyncio tasks and thread stacks.

    SIGALRM runs the handler in the main thread, where the test's event loop runs, so the failure is
    raised into the test (its teardown still runs). If the teardown hangs too, faulthandler ends the
    process a minute later with every thread's stack, so CI never stalls.
    """
    if TEST_TIME_LIMIT <= 0 or not hasattr(signal, "SIGALRM"):
        yield
        return
    name = request.node.nodeid

    def expired(signum: int, frame: FrameType | None) -> None:
        print(f"\n{name} ran longer than {TEST_TIME_LIMIT:.0f} s; its asyncio tasks and threads:", file=sys.stderr)
        _dump_asyncio_tasks()
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        faulthandler.dump_traceback_later(60, exit=True)
        pytest.fail(f"{name} did not finish within {TEST_TIME_LIMIT:.0f} s (stacks on stderr)", pytrace=False)

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, TEST_TIME_LIMIT)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        faulthandler.cancel_dump_traceback_later()
