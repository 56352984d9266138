"""The operator's view of a Slack bot, through the fake Slack, the scripted model (which reports usage) and the
`crewagent usage` / `crewagent audit` commands, on the embedded store and on Postgres: every model call's tokens
are booked to the person and channel who asked, and a daily budget refuses the person who spent it, not the one
beside them, leaving their waiting run as it was."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from crewagent.bot.config import BotConfig
from tests.support.bot_harness import bot_harness, message_text
from tests.support.cli_driver import cli
from tests.support.fakes.llm_server import Reply
from tests.support.probe_tool import last_user
from tests.support.scripts import Body, calls, previous_results
from tests.support.shell_sandbox import commands

ASKER, NEIGHBOUR = "U1", "U2"
USAGE = {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}
QUESTION = "Which project should I set up?"


def _asks(body: Body) -> Reply:
    return Reply(content=QUESTION, usage=USAGE)


@pytest.fixture(params=["files", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _configure(store_kind: str, request: pytest.FixtureRequest, **budgets: Any):
    url = request.getfixturevalue("database_url") if store_kind == "postgres" else None

    def configure(config: BotConfig) -> None:
        config.database_url = url
        config.budgets = config.budgets.model_copy(update=budgets)

    return configure, ([f"--database-url={url}"] if url else [])


async def _report(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    code, out, err = await cli([*argv, "--json"], "", monkeypatch, capsys)
    assert code == 0, err
    return json.loads(out)


async def test_usage_is_booked_per_person_and_channel_and_listed_by_the_cli(
    project: Path, store_kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure, database = _configure(store_kind, request)
    async with bot_harness(project, ["multi-workflows"], configure=configure) as h:
        h.llm.responder = _asks
        await h.start_waiting_run("hello-linear")
        calls = len(h.llm.requests)
        assert calls >= 1
        by_user = await _report(["usage", "--by", "user", *database], monkeypatch, capsys)
        by_channel = await _report(["usage", "--by", "channel", "--since", "1d", *database], monkeypatch, capsys)
    assert by_user["rows"] == [{"user": ASKER, "calls": calls, "input_tokens": 100 * calls,
                                "output_tokens": 20 * calls, "total_tokens": 120 * calls}]
    assert [(r["channel"], r["total_tokens"]) for r in by_channel["rows"]] == [("C1", 120 * calls)]


async def test_a_spent_budget_refuses_its_person_but_not_the_one_beside_them(
    project: Path, store_kind: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure, database = _configure(store_kind, request, daily_tokens_per_user=100)
    async with bot_harness(project, ["multi-workflows"], configure=configure) as h:
        h.llm.responder = _asks
        top = await h.start_waiting_run("hello-linear")  # spends 120 of the asker's 100 tokens
        asked = len(h.llm.requests)

        mark = h.mark()
        await h.reply(top, "TaskNest", user=ASKER)
        refusal = await h.posted_text("daily token budget is used up", since=mark)
        text = message_text(refusal)
        assert "budgets.daily_tokens_per_user" in text and "00:00 UTC" in text
        await h.settle()
        assert len(h.llm.requests) == asked  # the model was not asked
        await h.wait_status(top, "Waiting for your reply")  # the run waits as it did

        other = await h.mention("hello-linear", user=NEIGHBOUR)
        await h.wait_status(other, "Waiting for your reply")
        assert len(h.llm.requests) > asked
        audit = await _report(["audit", "--user", ASKER, *database], monkeypatch, capsys)
        everyone = await _report(["audit", *database], monkeypatch, capsys)
    [refused] = audit
    assert refused["kind"] == "budget.refused" and refused["channel"] == "C1"
    assert refused["detail"] == {"budget": "daily_tokens_per_user", "limit": 100, "spent": 120}
    assert [e["person"] for e in everyone] == [ASKER]  # the neighbour was never refused


def _asks_or_runs_a_forbidden_command(body: Body) -> Reply:
    if not previous_results(body) and last_user(body) == "clean up":
        return Reply(tool_calls=calls(("shell_run", {"command": "rm -rf build"})).tool_calls, usage=USAGE)
    return Reply(content=QUESTION, usage=USAGE)


def _forbidding_commands(config: BotConfig) -> None:
    config.tool_policy = config.tool_policy.model_copy(update={"commands": commands(default="forbid")})


async def _scrape(h: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    url = h.url.replace("/slack/events", "/metrics")
    async with h.http.get(url) as response:
        assert response.status == 200 and response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_metrics_after_a_run_agree_with_what_happened(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"], configure=_forbidding_commands) as h:
        h.llm.responder = _asks_or_runs_a_forbidden_command
        top = await h.start_waiting_run("hello-linear")
        mark = h.mark()
        await h.reply(top, "clean up")  # the model asks for a command the policy forbids, then asks again
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        h.llm.add_error(500, "upstream exploded")
        await h.reply(top, "go on")  # the model fails: the run fails
        await h.posted_text("kept failing (HTTP 500", since=mark)
        await h.settle()
        answered = [r for r in h.llm.requests][:-1]  # every request but the failed one was answered
        metrics = await _scrape(h)
    assert metrics[("crewagent_model_tokens_total", (("direction", "input"),))] == 100 * len(answered)
    assert metrics[("crewagent_model_tokens_total", (("direction", "output"),))] == 20 * len(answered)
    assert metrics[("crewagent_runs_total", (("outcome", "failed"),))] == 1
    assert metrics[("crewagent_command_decisions_total", (("decision", "refused"),))] == 1
    events = metrics[("crewagent_events_received_total", ())]
    assert events >= 3 and metrics[("crewagent_ack_seconds_count", ())] == events
    assert metrics[("crewagent_model_call_seconds_count", (("outcome", "error"),))] == 1
    assert metrics[("crewagent_outbox_pending", ())] == 0


def _asks_to_run_a_command(body: Body) -> Reply:
    if not previous_results(body) and last_user(body) == "build it":
        return calls(("shell_run", {"command": "make build"}))
    return Reply(content=QUESTION, usage=USAGE)


def _asking_commands(config: BotConfig) -> None:
    config.tool_policy = config.tool_policy.model_copy(update={"commands": commands(default="ask")})


async def test_a_denied_command_is_in_the_audit_with_who_denied_it(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with bot_harness(project, ["multi-workflows"], configure=_asking_commands) as h:
        h.llm.responder = _asks_to_run_a_command
        top = await h.start_waiting_run("hello-linear")
        mark = h.mark()
        await h.reply(top, "build it")
        await h.posted_text("Run a command?", since=mark)
        await h.settle()
        deny, card = h.button(top, "Deny")
        await h.click(deny, card, user=ASKER)
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        [entry] = await _report(["audit", "--since", "1h"], monkeypatch, capsys)
        assert entry["run_id"]
        same = await _report(["audit", "--run", entry["run_id"]], monkeypatch, capsys)
        code, table, _ = await cli(["audit", "--user", ASKER], "", monkeypatch, capsys)
        metrics = await _scrape(h)
    assert entry["kind"] == "approval.decided" and entry["person"] == ASKER and entry["channel"] == "C1"
    assert entry["detail"]["decision"] == "denied" and entry["detail"]["tool"] == "shell_run"
    assert entry["detail"]["input"] == {"command": "make build"} and entry["detail"]["title"] == "Run a command?"
    assert same == [entry]
    assert code == 0 and "denied shell_run: `make build`" in table and ASKER in table
    assert metrics[("crewagent_command_decisions_total", (("decision", "denied"),))] == 1


async def test_the_inbox_gauge_counts_the_replies_that_wait_for_their_thread(
    project: Path, store_kind: str, request: pytest.FixtureRequest
) -> None:
    configure, _ = _configure(store_kind, request)
    inbox = "database" if store_kind == "postgres" else "local"
    released = asyncio.Event()

    async def held_until_released(body: Body) -> Reply:
        await released.wait()
        return Reply(content=QUESTION, usage=USAGE)

    async with bot_harness(project, ["multi-workflows"], configure=configure) as h:
        h.llm.responder = _asks
        top = await h.start_waiting_run("hello-linear")
        asked = len(h.llm.requests)
        h.llm.responder = held_until_released
        started = time.time()
        await h.reply(top, "TaskNest")  # the run takes it and waits on the model
        acked = time.time()
        await h.llm.wait_for_requests(asked + 1)
        await h.reply(top, "and one more thing")  # acknowledged, kept behind the pumping run
        kept = time.time()
        waiting = await _scrape(h)
        scraped = time.time()
        released.set()
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        drained = await _scrape(h)
    # the reply the run is working on, and the one behind it; with replicas, none waits locally
    assert waiting[("crewagent_inbox_waiting", (("inbox", inbox),))] == 2
    assert drained[("crewagent_inbox_waiting", (("inbox", inbox),))] == 0
    # the oldest is the reply the run works on, kept before the one behind it; none is left after
    oldest = waiting[("crewagent_inbox_oldest_seconds", (("inbox", inbox),))]
    assert kept - acked <= oldest <= scraped - started
    assert drained[("crewagent_inbox_oldest_seconds", (("inbox", inbox),))] == 0
    if store_kind == "postgres":
        assert waiting[("crewagent_inbox_waiting", (("inbox", "local"),))] == 0
