"""`workers: N`: a front door routing each thread to one of N real worker processes.

The workers are spawned processes running the ordinary bot; the tests drive them exactly as Slack
would (signed HTTP deliveries, or envelopes over the local Socket Mode websocket) and look only at
what reaches FakeSlack.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

import aiohttp
import pytest

from bot.actions import ButtonValue
from bot.config import ConfigError, load_config
from bot.forms import FormContext
from bot.front import ShardedBot
from bot.pool import WorkerPool, worker_config
from bot.shards import parse_body, route, shard_of
from core.llm import LLMSettings
from tests.conftest import EXAMPLES
from tests.fakes import FakeSlack, ScriptedLLM
from tests.fakes.slack_events import (
    app_mention_event,
    block_actions_payload,
    deliver_event,
    deliver_interaction,
    message_event,
    new_ts,
    url_verification_body,
    view_submission_payload,
)
from tests.scripts import hello_branch_responder
from tests.test_bot_support import SECRET, Harness, Mode, make_config, message_text


def _thread_on(shard: int, count: int = 2, channel: str = "C1") -> str:
    """A fresh top-level ts whose thread the given worker owns."""
    while True:
        ts = new_ts()
        if shard_of(channel, ts, count) == shard:
            return ts


@asynccontextmanager
async def sharded(
    project: Path, packages: Sequence[str], *, mode: Mode = "http", latency: float = 0.0, workers: int = 2
) -> AsyncIterator[tuple[Harness, ShardedBot]]:
    async with FakeSlack() as slack, ScriptedLLM(latency=latency) as llm:
        config = make_config(slack, project, packages, mode=mode)
        config.workers = workers
        settings = LLMSettings(model="scripted", base_url=llm.base_url, max_retries=0, timeout=10)
        front = ShardedBot(config, llm_settings=settings)
        async with aiohttp.ClientSession() as http:
            h = Harness(slack=slack, llm=llm, project=project, config=config, mode=mode, http=http)
            try:
                if mode == "socket":
                    await front.start_socket()
                    await slack.socket_mode.wait_connected()
                else:
                    port = await front.start_http("127.0.0.1", 0)
                    h.url = f"http://127.0.0.1:{port}/slack/events"
                yield h, front
            finally:
                await front.close()


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


# ---- routing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("count", [2, 3, 5])
def test_every_request_about_a_thread_reaches_the_same_worker(count: int) -> None:
    top = new_ts()
    key = f"T1:C1:{top}"
    requests = [
        app_mention_event("<@UBOT> hello", ts=top),
        message_event("a reply", ts=new_ts(), thread_ts=top),
        block_actions_payload("crew:widget:0", ButtonValue(s=key, w="pick", i=0).encode()),
        {"type": "block_actions", "actions": [{"block_id": ButtonValue(s=key, e=1).encode(), "value": None}]},
        view_submission_payload("crew:form", FormContext(s=key, w="details").model_dump_json(), {}),
    ]
    owners = {route(payload, count) for payload in requests}
    assert owners == {shard_of("C1", top, count)}


def test_requests_naming_no_thread_go_to_worker_zero() -> None:
    assert route(url_verification_body(), 4) == 0
    assert route(None, 4) == 0
    assert route({"type": "block_actions", "actions": [{"value": "not ours"}]}, 4) == 0
    assert parse_body(b"{not json", "application/json") is None
    form = urlencode({"payload": json.dumps({"type": "view_submission"})}).encode()
    assert parse_body(form, "application/x-www-form-urlencoded") == {"type": "view_submission"}


def test_threads_spread_over_the_workers() -> None:
    owners = [shard_of("C1", new_ts(), 4) for _ in range(400)]
    assert all(owners.count(i) > 50 for i in range(4))


async def test_each_worker_gets_its_share_of_the_global_limits(project: Path, slack: FakeSlack) -> None:
    config = make_config(slack, project, ["hello-branch"], max_runs=9)
    config.limits.status_edits_per_second = 3.0
    share = worker_config(config, 2, "internal")
    assert share.limits.max_concurrent_runs == 5 and share.limits.status_edits_per_second == 1.5
    assert share.slack.signing_secret is not None and share.slack.signing_secret.get_secret_value() == "internal"
    assert share.slack.app_token is None and share.workers == 1


# ---- end to end ---------------------------------------------------------------------------------


async def test_threads_on_two_workers_run_side_by_side_and_a_killed_worker_resumes_its_run(project: Path) -> None:
    async with sharded(project, ["hello-branch"], latency=0.3) as (h, front):
        h.llm.responder = hello_branch_responder(preset_branch="greenfield")
        calm, doomed = _thread_on(0), _thread_on(1)
        await h.mention("hello-branch", ts=doomed)
        await h.llm.wait_for_requests(1)  # the doomed run's first model call is in flight
        await h.mention("hello-branch", ts=calm)
        victim = front.pool.pids()[1]
        assert victim is not None and victim != front.pool.pids()[0]
        os.kill(victim, signal.SIGKILL)
        mark = h.mark()
        await h.reply(doomed, "thanks!")  # acked at once; delivered when the worker is back

        notice = await h.posted_text("The bot restarted; resuming this run", timeout=30)
        assert notice["thread_ts"] == doomed
        for ts in (calm, doomed):
            done = await h.posted(lambda p, ts=ts: p.get("thread_ts") == ts and "completed." in message_text(p),
                                  timeout=30)
            assert "artifacts/plan-greenfield.md" in message_text(done)
        assert front.pool.restarts == 1 and front.pool.pids()[1] not in (None, victim)
        assert not [m for m in h.thread(calm) if "restarted" in message_text(m)], "the other worker never stopped"
        # The reply sent while the worker was down was not lost: it is answered once the run completed.
        answer = await h.posted(
            lambda p: p.get("thread_ts") == doomed and "complete" in message_text(p) and "completed." not in
            message_text(p), since=mark, timeout=10,
        )
        assert "Progress:" not in message_text(answer)


async def test_the_front_door_checks_signatures_and_relays_worker_answers(project: Path) -> None:
    async with sharded(project, ["multi-workflows"]) as (h, _):
        envelope = app_mention_event("<@UBOT> hi")
        assert (await deliver_event(h.http, h.url, SECRET, envelope, signed=False))[0] == 401
        expired = int(time.time()) - 6 * 60
        assert (await deliver_event(h.http, h.url, SECRET, envelope, timestamp=expired))[0] == 401
        assert (await deliver_event(h.http, h.url, "wrong-secret", envelope))[0] == 401
        status, body = await deliver_event(h.http, h.url, SECRET, url_verification_body("abc"))
        assert status == 200 and "abc" in body
        async with h.http.get(h.url.replace("/slack/events", "/healthz")) as response:
            assert (await response.json()) == {"ok": True, "workers": 2, "serving": 2}

        # A modal's validation errors are the worker's ack, relayed to Slack as-is.
        top = await h.mention("Mary")
        await h.posted_text("[1] Run the hello-linear workflow")
        h.llm.add_reply(tool_calls=[("ui_ask_user", {
            "widgetId": "details", "type": "form", "message": "A few details first.",
            "schema": {"type": "object", "properties": {"name": {"type": "string", "title": "Name"}},
                       "required": ["name"]},
        })])
        await h.reply(top, "I need help planning")
        await h.posted_text("A few details first.")
        open_form, message = h.button(top, "Open form")
        mark = h.mark()
        await h.click(open_form, message)
        view = (await h.slack.wait_for("views.open", since=mark))["view"]
        status, ack = await h.submit_form(view, {})
        assert status == 200 and ack is not None and ack["response_action"] == "errors"
        assert set(ack["errors"]) == {"field:name"}
        status, _ = await deliver_interaction(
            h.http, h.url, SECRET, block_actions_payload("crew:control:stop", '{"s":"T1:C1:1.1"}'), signed=False
        )
        assert status == 401


async def test_socket_mode_with_workers_runs_the_journey(project: Path) -> None:
    async with sharded(project, ["hello-branch"], mode="socket") as (h, _):
        h.llm.responder = hello_branch_responder()
        top = await h.mention("hello-branch")
        await h.posted_text("greenfield")
        brown, widget = h.button(top, "Brownfield")
        mark = h.mark()
        await h.click(brown, widget)
        done = await h.posted_text("completed.", since=mark, timeout=15)
        assert "artifacts/plan-brownfield.md" in message_text(done)


async def test_a_worker_that_cannot_start_fails_the_start_with_a_reason(
    project: Path, slack: FakeSlack, tmp_path: Path
) -> None:
    config = make_config(slack, project, ["hello-branch"])
    config.workers = 2
    config.default.packages = [tmp_path / "missing-package"]  # each worker loads packages itself
    pool = WorkerPool(config)
    with pytest.raises(RuntimeError, match="worker 0 did not start|worker 1 did not start"):
        await pool.start()
    assert pool.pids() == [None, None]


def test_worker_counts_out_of_range_are_refused_with_the_key(project: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--workers: must be between 1 and 32, got 0"):
        load_config(project=project, packages=[EXAMPLES / "hello-branch"], workers=0, env={})
    bad = tmp_path / "crewagent.yml"
    bad.write_text("workers: 100\n")
    with pytest.raises(ConfigError, match="workers"):
        load_config(config_path=bad, project=project, packages=[EXAMPLES / "hello-branch"], env={})
    good = tmp_path / "good.yml"
    good.write_text("workers: 3\n")
    assert load_config(config_path=good, project=project, packages=[EXAMPLES / "hello-branch"], env={}).workers == 3
