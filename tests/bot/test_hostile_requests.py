"""The HTTP front door: malformed signed requests get a 401 (never a 500), and it listens where it is told."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from crewagent.bot.config import load_config
from crewagent.cli.main import build_parser
from tests.support.paths import EXAMPLES, REPO
from tests.support.fakes import BOT_TOKEN, FakeSlack
from tests.support.processes import wait_healthy
from tests.support.fakes.slack_events import app_mention_event, block_actions_payload, deliver_event, deliver_interaction
from tests.support.bot_harness import SECRET, bot_harness


@pytest.mark.parametrize("timestamp", ["soon", "", "1e9", "-", "١٢٣", "9" * 400, " 12"])
async def test_a_malformed_timestamp_is_a_401(project: Path, timestamp: str, caplog: pytest.LogCaptureFixture) -> None:
    async with bot_harness(project) as h:
        with caplog.at_level(logging.ERROR):
            envelope = app_mention_event("<@UBOT> hi")
            status, body = await deliver_event(h.http, h.url, SECRET, envelope, timestamp=timestamp)
            assert status == 401 and "Traceback" not in body
            payload = block_actions_payload("crew:control:stop", '{"s":"T1:C1:1.1","r":"x","x":"stop"}')
            status, body = await deliver_interaction(h.http, h.url, SECRET, payload, timestamp=timestamp)
            assert status == 401 and "Traceback" not in body
        await h.settle()
        assert [r for r in caplog.records if r.exc_info] == []
        assert h.slack.calls_to("chat.postMessage") == [] and h.slack.calls_to("chat.postEphemeral") == []


def test_host_comes_from_the_flag_then_the_config_file_and_defaults_to_every_interface(
    project: Path, tmp_path: Path
) -> None:
    package = str(EXAMPLES / "hello-branch")
    assert load_config(project=project, packages=[package], env={}).host == "0.0.0.0"
    config_file = tmp_path / "crewagent.yml"
    config_file.write_text("host: 127.0.0.1\n")
    assert load_config(config_path=config_file, project=project, packages=[package], env={}).host == "127.0.0.1"
    flagged = load_config(config_path=config_file, project=project, packages=[package], env={}, host="::1")
    assert flagged.host == "::1"
    args = build_parser().parse_args(["serve", "--host", "127.0.0.2", "--port", "0"])
    assert (args.host, args.port) == ("127.0.0.2", 0)


async def test_serve_listens_only_on_the_host_it_is_given(project: Path, tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": slack.api_url,
            "CREWAGENT_LOG_FORMAT": "json",
            "CREWAGENT_MODEL": "scripted",
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "CREWAGENT_HOME": str(tmp_path / "home"),
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crewagent.cli", "serve", "--project", str(project), "--package", str(EXAMPLES / "hello-branch"),
            "--host", "127.0.0.2", "--port", "0",
            cwd=REPO, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        )
        try:
            assert proc.stderr is not None
            listening = None
            while listening is None:
                line = await asyncio.wait_for(proc.stderr.readline(), 15)
                assert line, "serve exited before listening"
                if line.startswith(b"{") and json.loads(line).get("msg") == "listening for Slack events":
                    listening = json.loads(line)
            assert listening["host"] == "127.0.0.2"
            port = listening["port"]
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
                await wait_healthy(http, f"http://127.0.0.2:{port}/healthz", timeout=30)
                with pytest.raises(aiohttp.ClientConnectionError):
                    async with http.get(f"http://127.0.0.1:{port}/healthz"):
                        pass
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(proc.wait(), 15) == 0
        finally:
            if proc.returncode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                await proc.wait()
