"""`crewagent serve` killed with SIGKILL while Slack answers 503: what it could not post is shown once after a restart."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from crewagent.bot.outbox.entry import marked_entry
from tests.support.fakes import FakeSlack, ScriptedLLM
from tests.support.fakes.slack_events import app_mention_event, deliver_event, new_ts
from tests.support.processes import Spawner, kill_group, wait_healthy
from tests.support.scripts import hello_linear_responder
from tests.support.serve_process import SECRET, start_serve

pytestmark = pytest.mark.slow  # kill -9 of serve during a Slack outage

WAIT = 60.0
QUESTION = "What is the topic?"


async def test_messages_pending_when_serve_is_killed_during_a_503_outage_are_shown_once_after_restart(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    home = tmp_path / "home"
    async with FakeSlack() as slack, ScriptedLLM() as llm, aiohttp.ClientSession() as http:
        llm.responder = hello_linear_responder()
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)

        slack.fail_everything("unavailable")
        top = new_ts()
        slack.add_message("C1", "<@UBOT> hello-linear", ts=top)
        status, _ = await deliver_event(
            http, f"http://127.0.0.1:{port}/slack/events", SECRET, app_mention_event("<@UBOT> hello-linear", ts=top)
        )
        assert status == 200
        await slack.wait_for(
            "chat.postMessage", lambda p: QUESTION in str(p.get("blocks")) and marked_entry(p) is not None, timeout=WAIT
        )
        tried = {marked_entry(p) for p in slack.calls_to("chat.postMessage")} - {None}
        assert tried, "the question went through the outbox"
        kill_group(process.pid)
        await asyncio.wait_for(process.wait(), WAIT)

        slack.recover()
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        restarted = time.monotonic()

        def shown_ids() -> list[str]:
            return [e for m in slack.messages.values() if (e := marked_entry(m)) is not None]

        async with asyncio.timeout(WAIT):
            while not tried <= set(shown_ids()):
                await slack.wait_for("chat.postMessage", since=len(slack.calls), timeout=WAIT)
        print(f"pending messages shown {time.monotonic() - restarted:.1f} s after the restart")
        shown = shown_ids()
        assert all(shown.count(entry) == 1 for entry in tried)
        questions = [m for m in slack.messages.values() if m.get("thread_ts") == top and QUESTION in str(m.get("blocks"))]
        assert len(questions) == 1
        kill_group(process.pid)
