"""`crewagent serve` without a database, killed with SIGKILL while the owner's reply waits behind a
pumping run: after a restart on the same home, the reply reaches the model once and the run finishes once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp
import pytest

from tests.support.bot_harness import message_text
from tests.support.fakes import FakeSlack, ScriptedLLM
from tests.support.fakes.llm_server import Reply
from tests.support.fakes.slack_api import STREAMED
from tests.support.fakes.slack_events import app_mention_event, deliver_event, message_event, new_ts
from tests.support.processes import Spawner, kill_group, wait_healthy
from tests.support.scripts import HELLO_LINEAR_ANSWER, Body, hello_linear_responder, user_inputs
from tests.support.serve_process import SECRET, start_serve

pytestmark = pytest.mark.slow  # kill -9 of serve

WAIT = 60.0
CLOSING = "Result: artifacts/hello-linear/result.md"


async def test_a_reply_queued_behind_a_pumping_run_survives_kill_9_and_reaches_the_model_once(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    home = tmp_path / "home"
    script = hello_linear_responder()
    held = asyncio.Event()  # the run's first model call arrived and is being held back
    release = asyncio.Event()

    async def respond(body: Body) -> Reply:
        if not held.is_set():
            held.set()
            await release.wait()  # the process that asked is killed meanwhile
        return script(body)

    async with FakeSlack() as slack, ScriptedLLM(responder=respond) as llm, aiohttp.ClientSession() as http:
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        top = new_ts()
        slack.add_message("C1", "<@UBOT> hello-linear", ts=top)
        status, _ = await deliver_event(
            http, f"http://127.0.0.1:{port}/slack/events", SECRET, app_mention_event("<@UBOT> hello-linear", ts=top)
        )
        assert status == 200
        await asyncio.wait_for(held.wait(), WAIT)

        reply_ts = new_ts()
        slack.add_message("C1", HELLO_LINEAR_ANSWER, ts=reply_ts, thread_ts=top)
        reply = message_event(HELLO_LINEAR_ANSWER, ts=reply_ts, thread_ts=top)
        status, _ = await deliver_event(http, f"http://127.0.0.1:{port}/slack/events", SECRET, reply)
        assert status == 200  # acknowledged while the run still pumps: it waits behind it on the thread's lane
        kill_group(process.pid)
        await asyncio.wait_for(process.wait(), WAIT)
        release.set()
        assert not any(HELLO_LINEAR_ANSWER in user_inputs(body) for body in llm.requests)

        since = len(slack.calls)
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        restarted = time.monotonic()
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        await slack.wait_for(("chat.postMessage", STREAMED), lambda p: CLOSING in message_text(p), since=since, timeout=WAIT)
        print(f"the run finished {time.monotonic() - restarted:.1f} s after the restart")

        # The answer was the newest input of exactly one request, and no request carries it twice.
        answered = [body for body in llm.requests if (inputs := user_inputs(body)) and inputs[-1] == HELLO_LINEAR_ANSWER]
        assert len(answered) == 1
        assert all(user_inputs(body).count(HELLO_LINEAR_ANSWER) <= 1 for body in llm.requests)
        closings = [m for m in slack.messages.values() if m.get("thread_ts") == top and CLOSING in message_text(m)]
        assert len(closings) == 1
        kill_group(process.pid)
