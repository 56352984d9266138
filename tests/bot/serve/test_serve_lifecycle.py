"""`crewagent serve` as an operator runs it: refused tokens, Slack unreachable, SIGTERM/SIGINT in every state.

Each test starts the real command as its own process group against the fake Slack Web API and
its Socket Mode endpoint (or a closed loopback port for "Slack unreachable").
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from crewagent.bot.connection import ATTEMPT_TIMEOUT
from crewagent.core.store.run_index import INDEX_FILE, JOURNAL_FILE
from tests.support.paths import EXAMPLES, REPO
from tests.support.fakes import APP_TOKEN, BOT_TOKEN, FakeSlack, ScriptedLLM
from tests.support.fakes.slack_events import app_mention_event
from tests.support.processes import Spawner, free_port, wait_healthy

pytestmark = pytest.mark.slow  # serve processes started, stopped and cut off from Slack

WAIT = 30.0  # bound on any one wait; only reached when a test fails
STOP_LIMIT = 5.0  # seconds a requested stop may take, in any state


class Serve:
    """A running `crewagent serve`, its stderr collected line by line as it comes."""

    def __init__(self, process: asyncio.subprocess.Process, port: int, http: aiohttp.ClientSession) -> None:
        self.process = process
        self.port = port
        self.http = http
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self._reader = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        assert self.process.stderr is not None
        while line := await self.process.stderr.readline():
            async with self._changed:
                self.lines.append(line.decode(errors="replace").rstrip("\n"))
                self._changed.notify_all()
        async with self._changed:
            self._changed.notify_all()

    @property
    def stderr(self) -> str:
        return "\n".join(self.lines)

    async def wait_lines(self, pattern: str, count: int = 1) -> list[str]:
        """Wait until `count` stderr lines match `pattern`."""

        def hits() -> list[str]:
            return [line for line in self.lines if re.search(pattern, line)]

        try:
            async with asyncio.timeout(WAIT), self._changed:
                await self._changed.wait_for(lambda: len(hits()) >= count or self._reader.done())
        except TimeoutError:
            pass
        assert len(hits()) >= count, f"expected {count} line(s) like {pattern!r}; stderr:\n{self.stderr}"
        return hits()

    async def health(self) -> tuple[int, dict[str, Any]]:
        async with self.http.get(f"http://127.0.0.1:{self.port}/healthz") as response:
            return response.status, await response.json()

    async def exit_status(self, limit: float = WAIT) -> int:
        """The exit status, once the process ends within `limit` seconds."""
        try:
            status = await asyncio.wait_for(self.process.wait(), limit)
        except TimeoutError:
            raise AssertionError(f"serve still running after {limit:.0f} s; stderr:\n{self.stderr}") from None
        await asyncio.wait_for(self._reader, WAIT)
        return status

    async def stop(self, sig: int) -> tuple[int, float]:
        """Send `sig`; (exit status, seconds it took)."""
        started = time.monotonic()
        self.process.send_signal(sig)
        status = await self.exit_status(limit=STOP_LIMIT + 10)
        return status, time.monotonic() - started


@asynccontextmanager
async def serve(
    spawn: Spawner, project: Path, tmp_path: Path, api_url: str, *, mode: str = "socket",
    bot_token: str = BOT_TOKEN, app_token: str = APP_TOKEN, model_url: str = "http://127.0.0.1:9/v1",
    log_format: str | None = None,
) -> AsyncIterator[Serve]:
    port = free_port()
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": bot_token,
        "SLACK_API_URL": api_url,
        "CREWAGENT_MODEL": "scripted",
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "test",
        "CREWAGENT_HOME": str(tmp_path / "home"),
    }
    env.pop("CREWAGENT_LOG_FORMAT", None)
    if mode == "socket":
        env["SLACK_APP_TOKEN"] = app_token
    else:
        env["SLACK_SIGNING_SECRET"] = "test-signing-secret"
    argv = [sys.executable, "-m", "crewagent.cli", "serve", "--project", str(project),
            "--package", str(EXAMPLES / "hello-branch"), "--port", str(port), "--host", "127.0.0.1"]
    if log_format:
        argv += ["--log-format", log_format]
    process = await spawn(*argv, cwd=REPO, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        yield Serve(process, port, http)


def closed_port_url() -> str:
    """A loopback URL nothing listens on: every connection is refused, like an unreachable Slack."""
    return f"http://127.0.0.1:{free_port()}/api/"


def assert_one_plain_line(stderr: str, token_name: str, where: str) -> None:
    named = [line for line in stderr.splitlines() if token_name in line]
    assert len(named) == 1, f"one line names {token_name}; stderr:\n{stderr}"
    assert where in named[0] and "Slack refused" in named[0]
    assert "Traceback" not in stderr and "Retrying" not in stderr
    assert BOT_TOKEN not in stderr and APP_TOKEN not in stderr and "revoked-" not in stderr


# ---- refused tokens ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_a_refused_bot_token_ends_serve_with_one_line_saying_where_to_get_one(
    project: Path, tmp_path: Path, spawn: Spawner, mode: str
) -> None:
    async with FakeSlack() as slack:
        slack.refused_tokens["xoxb-revoked-1"] = "invalid_auth"
        async with serve(spawn, project, tmp_path, slack.api_url, mode=mode, bot_token="xoxb-revoked-1") as crew:
            assert await crew.exit_status() == 2
        assert_one_plain_line(crew.stderr, "SLACK_BOT_TOKEN", "OAuth & Permissions")
        assert "(invalid_auth)" in crew.stderr
        assert slack.calls_to("auth.test") and not slack.calls_to("apps.connections.open")
        assert not slack.socket_mode.connection_count


async def test_a_refused_app_token_ends_serve_with_one_line_saying_where_to_get_one(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    async with FakeSlack() as slack:
        slack.refused_tokens["xapp-revoked-1"] = "token_revoked"
        async with serve(spawn, project, tmp_path, slack.api_url, app_token="xapp-revoked-1") as crew:
            assert await crew.exit_status() == 2
        assert_one_plain_line(crew.stderr, "SLACK_APP_TOKEN", "Basic Information → App-Level Tokens")
        assert "(token_revoked)" in crew.stderr
        assert len(slack.calls_to("apps.connections.open")) == 1  # refused once: no retrying
        assert not slack.socket_mode.connection_count


# ---- Slack unreachable ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["socket", "http"])
async def test_unreachable_slack_is_retried_with_growing_back_off_until_it_answers(
    project: Path, tmp_path: Path, spawn: Spawner, mode: str
) -> None:
    api_port = free_port()
    async with serve(spawn, project, tmp_path, f"http://127.0.0.1:{api_port}/api/", mode=mode) as crew:
        retries = await crew.wait_lines(r"auth\.test\) failed .*; retrying in \d+ s", count=2)
        delays = [int(m.group(1)) for line in retries if (m := re.search(r"retrying in (\d+) s", line))]
        assert delays[:2] == [1, 2], retries
        assert all("Traceback" not in line for line in crew.lines) and len(retries[0].splitlines()) == 1
        status, body = await crew.health()
        assert status == 503 and body["slack"] == "not connected" and body["ok"] is False

        async with FakeSlack(port=api_port) as slack:  # Slack is back where the bot was pointed
            health = await wait_healthy(crew.http, f"http://127.0.0.1:{crew.port}/healthz", timeout=WAIT)
            assert health["slack"] == "connected"
            if mode == "socket":
                assert slack.socket_mode.connection_count == 1
            status, took = await crew.stop(signal.SIGTERM)
        assert status == 0 and took < STOP_LIMIT, f"{took:.1f} s"


async def test_a_slack_outage_answer_is_retried_not_taken_for_a_refused_token(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    async with FakeSlack() as slack:
        slack.fail_next("auth.test", "service_unavailable", status=503)
        slack.fail_next("apps.connections.open", "ratelimited")
        async with serve(spawn, project, tmp_path, slack.api_url) as crew:
            health = await wait_healthy(crew.http, f"http://127.0.0.1:{crew.port}/healthz", timeout=WAIT)
            assert health["slack"] == "connected"
            await crew.wait_lines(r"auth\.test\) failed \(service_unavailable\); retrying in 1 s")
            await crew.wait_lines(r"apps\.connections\.open\) failed \(ratelimited\); retrying in 1 s")
            assert len(slack.calls_to("auth.test")) == 2 and len(slack.calls_to("apps.connections.open")) == 2
            status, _ = await crew.stop(signal.SIGTERM)
        assert status == 0


async def test_a_socket_url_that_never_connects_is_replaced_by_a_new_one(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    async with FakeSlack() as slack:
        dead = f"ws://127.0.0.1:{free_port()}/link/?ticket=expired"
        issued: list[str] = []

        def connections_open(params: dict[str, Any]) -> dict[str, Any]:
            issued.append(dead if not issued else slack.socket_mode.issue_url())
            return {"ok": True, "url": issued[-1]}

        slack.set_response("apps.connections.open", connections_open)
        async with serve(spawn, project, tmp_path, slack.api_url) as crew:
            await slack.socket_mode.wait_connected(timeout=WAIT + ATTEMPT_TIMEOUT)
            health = await wait_healthy(crew.http, f"http://127.0.0.1:{crew.port}/healthz", timeout=WAIT)
            assert health["slack"] == "connected" and issued[0] == dead and len(issued) == 2
            await crew.wait_lines("did not open within .* asking for a new URL")
            status, _ = await crew.stop(signal.SIGTERM)
        assert status == 0 and "Traceback" not in crew.stderr


# ---- SIGTERM / SIGINT in every state ----------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_stop_while_slack_is_unreachable_ends_serve_at_once(
    project: Path, tmp_path: Path, spawn: Spawner, sig: int
) -> None:
    async with serve(spawn, project, tmp_path, closed_port_url()) as crew:
        await crew.wait_lines(r"retrying in \d+ s")  # connecting, between attempts
        status, took = await crew.stop(sig)
    assert status == 0 and took < STOP_LIMIT, f"{took:.1f} s"
    assert "Traceback" not in crew.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_stop_while_connected_and_idle_ends_serve(
    project: Path, tmp_path: Path, spawn: Spawner, sig: int
) -> None:
    async with FakeSlack() as slack, serve(spawn, project, tmp_path, slack.api_url) as crew:
        health = await wait_healthy(crew.http, f"http://127.0.0.1:{crew.port}/healthz", timeout=WAIT)
        assert health["socket_mode"] == "connected" and health["slack"] == "connected"
        status, took = await crew.stop(sig)
    assert status == 0 and took < STOP_LIMIT, f"{took:.1f} s"
    assert "Traceback" not in crew.stderr


async def test_a_stop_in_the_middle_of_a_run_ends_serve_within_the_limit(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    async with FakeSlack() as slack, ScriptedLLM() as llm:
        llm.add_delay(120)  # the run's model call is still running when the stop comes
        async with serve(spawn, project, tmp_path, slack.api_url, model_url=llm.base_url) as crew:
            await wait_healthy(crew.http, f"http://127.0.0.1:{crew.port}/healthz", timeout=WAIT)
            await slack.socket_mode.wait_connected(timeout=WAIT)
            event = app_mention_event("<@UBOT> hello-branch")
            envelope = await slack.socket_mode.send_envelope("events_api", event)
            await slack.socket_mode.wait_ack(envelope)
            await llm.wait_for_requests(1, timeout=WAIT)
            status, took = await crew.stop(signal.SIGTERM)
    assert status == 0 and took < STOP_LIMIT, f"{took:.1f} s"
    home = tmp_path / "home"  # a clean stop folds the run index: an earlier release reads runs-index.json only
    assert (home / JOURNAL_FILE).read_text() == ""
    assert len(json.loads((home / INDEX_FILE).read_text())["runs"]) == 1
