"""The outbox on its own, over the real SDK and the fake Slack: recorded before it is sent, sent in order,
tried again through outages, found again instead of posted twice, given up when it never can be."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from slack_sdk.errors import SlackApiError

from crewagent.bot.native.fallbacks import STATUS, Fallbacks
from crewagent.cli.runs_cmd import run as runs_command
from crewagent.bot.outbox.courier import Courier
from crewagent.bot.outbox.entry import OutboxEntry, with_marker
from crewagent.bot.outbox.sqlite_ledger import SqliteLedger, read_given_up
from crewagent.bot.slack_client import PacedWebClient
from tests.support.fakes import BOT_TOKEN, FakeSlack
from tests.support.fakes.slack_events import app_home_opened_event
from tests.support.scripts import hello_linear_responder
from tests.support.outage_bot import outage_bot

THREAD = "1700000000.000001"


@asynccontextmanager
async def courier(slack: FakeSlack, path: Path, **options: float) -> AsyncIterator[Courier]:
    client = PacedWebClient(token=BOT_TOKEN, base_url=slack.api_url)
    ledger = SqliteLedger(path)
    await ledger.open()
    sender = Courier(client, ledger, **options)
    await sender.start()
    try:
        yield sender
    finally:
        await sender.close()
        await ledger.close()


def texts(slack: FakeSlack) -> list[str]:
    found = [m for (ch, _), m in slack.messages.items() if ch == "C1" and m.get("thread_ts") == THREAD]
    return [str(m["text"]) for m in sorted(found, key=lambda m: float(m["ts"]))]


async def test_posts_made_during_an_outage_are_shown_in_order_once_slack_is_back(tmp_path: Path) -> None:
    async with FakeSlack() as slack, courier(slack, tmp_path / "outbox.sqlite") as sender:
        outage = slack.fail_everything("reset")
        first = await sender.post("C1", THREAD, {"text": "one"})
        assert first is None  # not shown yet; kept
        for text in ("two", "three"):
            assert await sender.post("C1", THREAD, {"text": text}) is None
        assert texts(slack) == []
        slack.recover()
        assert await sender.idle(30)
        assert texts(slack) == ["one", "two", "three"]
        assert outage.answered  # the first post met the dropped connection
        assert await sender.post("C1", THREAD, {"text": "four"}) is not None  # nothing waits: sent at once


async def test_an_entry_that_reached_slack_before_a_crash_is_not_posted_again(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite"
    async with FakeSlack() as slack:
        ledger = SqliteLedger(path)
        await ledger.open()
        entry = OutboxEntry(kind="post", channel="C1", thread_ts=THREAD, payload={})
        entry.payload = with_marker(entry.id, {"text": "the question"})
        await ledger.add(entry)  # recorded, then Slack took it, then the process died before it said so
        await ledger.close()
        slack.add_message("C1", "the question", user="UBOT", thread_ts=THREAD)
        await slack.client().chat_postMessage(channel="C1", thread_ts=THREAD, **entry.payload)
        slack.messages.pop(next(k for k, m in slack.messages.items() if m.get("user") == "UBOT" and not m.get("bot_id")))
        async with courier(slack, path) as sender:
            assert await sender.idle(30)
        assert texts(slack) == ["the question"]
        assert slack.calls_to("conversations.replies")
        async with courier(slack, path) as sender:
            assert sender.waiting() == 0  # done for good


@pytest.mark.slow  # waits out Slack's failures and Retry-After
async def test_a_refused_post_is_given_up_at_once_and_an_unsent_one_after_its_time(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite"
    async with FakeSlack() as slack, courier(slack, path, give_up_after=1.0) as sender:
        slack.fail_next("chat.postMessage", "channel_not_found")
        assert await sender.post("C1", THREAD, {"text": "lost"}) is None
        slack.fail_everything("unavailable")
        assert await sender.post("C1", THREAD, {"text": "late"}) is None
        assert await sender.idle(30)
        given_up = await sender.ledger.given_up(0.0)
        assert [e.payload["text"] for e in given_up] == ["lost", "late"]
        assert given_up[0].error == "channel_not_found"
        assert given_up[1].error == "not delivered in time (last: service_unavailable)"
        assert sender.given_up == 2
    assert [e.payload["text"] for e in read_given_up(path)] == ["lost", "late"]


@pytest.mark.slow  # waits out Slack's failures and Retry-After
async def test_a_429_is_not_asked_again_before_its_retry_after(tmp_path: Path) -> None:
    async with FakeSlack() as slack, courier(slack, tmp_path / "outbox.sqlite") as sender:
        outage = slack.fail_everything("ratelimited", seconds=3.0, retry_after=2)
        await sender.post("C1", THREAD, {"text": "done"})  # the SDK waits out Retry-After, then the outbox
        assert await sender.idle(30)
        assert texts(slack) == ["done"]
        times = [at for method, at in outage.answered if method == "chat.postMessage"]
        posts = [t for (m, _), t in zip(slack.calls, slack.call_times) if m == "chat.postMessage"]
        for refused in times:
            later = [t for t in posts if t > refused]
            assert not later or later[0] - refused >= 2.0


@pytest.mark.slow  # waits out Slack's failures and Retry-After
async def test_a_transient_failure_keeps_a_feature_on_and_a_refusal_turns_it_off() -> None:
    async with FakeSlack() as slack:
        client = PacedWebClient(token=BOT_TOKEN, base_url=slack.api_url)
        fallbacks = Fallbacks()
        errors: list[BaseException] = []
        for kind in ("unavailable", "reset", "ratelimited"):
            slack.fail_everything(kind, retry_after=0)  # type: ignore[arg-type]
            try:
                await client.assistant_threads_setStatus(channel_id="C1", thread_ts=THREAD, status="x")
            except Exception as exc:  # whatever the SDK raises for it
                errors.append(exc)
            slack.recover()
        assert len(errors) == 3
        for exc in errors:
            assert not fallbacks.fall_back("C1:t", STATUS, exc)
        assert fallbacks.allows("C1:t", STATUS) and fallbacks.count == 0
        slack.fail_next("assistant.threads.setStatus", "method_not_supported_for_channel_type")
        try:
            await client.assistant_threads_setStatus(channel_id="C1", thread_ts=THREAD, status="x")
        except SlackApiError as exc:
            assert fallbacks.fall_back("C1:t", STATUS, exc)
        assert not fallbacks.allows("C1:t", STATUS)


async def test_a_message_slack_refused_is_listed_on_its_owners_home_tab(project: Path) -> None:
    async with outage_bot(project, responder=hello_linear_responder()) as h:
        h.slack.fail_next("chat.postMessage", "is_archived", times=1000)
        h.slack.fail_next("chat.startStream", "not_allowed", times=1000)  # so the question is posted, not streamed
        await h.mention("hello-linear")
        await h.slack.wait_for("chat.postMessage", lambda p: "What is the topic?" in str(p.get("blocks")))
        await h.settle()
        mark = len(h.slack.calls)
        assert await h.event(app_home_opened_event("U1")) == 200
        view = await h.slack.wait_for("views.publish", lambda p: p.get("user_id") == "U1", since=mark)
        shown = str(view["view"]["blocks"])
        assert "Messages Slack did not take" in shown and "What is the topic?" in shown and "is_archived" in shown
        mark = len(h.slack.calls)
        assert await h.event(app_home_opened_event("U2")) == 200
        other = await h.slack.wait_for("views.publish", lambda p: p.get("user_id") == "U2", since=mark)
        assert "Messages Slack did not take" not in str(other["view"]["blocks"])

        assert h.bot is not None
        run_id = h.bot.engine.runs.list()[0].run_id
        lines: list[str] = []
        assert runs_command(argparse.Namespace(runs_action="show", run_id=run_id), lines.append) == 0
        assert any(line.startswith("Not shown in Slack (is_archived)") and "topic" in line for line in lines), lines
