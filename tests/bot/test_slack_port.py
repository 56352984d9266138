"""The one way out to Slack, over the real SDK and the fake Slack Web API: a durable post outlives an
outage, what need not survive one fails soft (logged once, never raised), and nothing is sent for a
thread whose lease this process knows it lost."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from slack_sdk.errors import SlackApiError

from crewagent.bot.base.lease import HELD, Lease, mark_lost
from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.native.fallbacks import Fallbacks
from crewagent.bot.native.status_line import StatusLines
from crewagent.bot.outgoing import Edit, Ephemeral, Post, Reaction, StatusLine, Title
from crewagent.bot.render.message import SlackMessage
from crewagent.bot.slack_client import PacedWebClient
from crewagent.bot.slack_port import SlackPort
from crewagent.bot.slack_send import Priority
from crewagent.bot.status import StatusBoard
from tests.support.fakes import BOT_TOKEN, FakeSlack
from tests.support.reply_streams import reply_port

THREAD = "1700000000.000001"
KEY = ThreadKey("T1", "C1", THREAD)
WAIT = 30.0


def thread_texts(slack: FakeSlack) -> list[str]:
    found = [m for (ch, _), m in slack.messages.items() if ch == "C1" and m.get("thread_ts") == THREAD]
    return [str(m["text"]) for m in sorted(found, key=lambda m: float(m["ts"]))]


async def test_a_durable_post_sent_during_a_slack_outage_reaches_the_thread_once_slack_is_back(tmp_path: Path) -> None:
    async with FakeSlack() as slack, reply_port(slack.api_url, tmp_path / "outbox.sqlite") as (port, courier):
        outage = slack.fail_everything("reset")
        delivery = await port.send(Post("C1", THREAD, SlackMessage(text="the plan is ready")))
        assert delivery.sent and delivery.ts is None  # kept by the outbox, not shown yet
        assert thread_texts(slack) == []
        slack.recover()
        assert await courier.idle(WAIT)
        assert thread_texts(slack) == ["the plan is ready"]
        assert outage.answered  # the post met the outage first


async def test_what_need_not_outlive_an_outage_fails_soft_with_one_log_line_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with FakeSlack() as slack:
        port = SlackPort(PacedWebClient(token=BOT_TOKEN, base_url=slack.api_url))
        slack.fail_everything("unavailable")
        with caplog.at_level(logging.WARNING, logger="crewagent.bot.slack_port"):
            ephemeral = await port.send(Ephemeral("C1", "U1", "only you see this", THREAD))
            line = await port.send(StatusLine("C1", THREAD, "is working…", ["Writing artifacts/a.md"]))
            post = await port.send(Post("C1", THREAD, SlackMessage(text="a status message"), durable=False))
        for delivery in (ephemeral, line, post):
            assert not delivery.sent and not delivery.fenced and delivery.ts is None
            assert isinstance(delivery.error, SlackApiError)
        failed = [r for r in caplog.records if r.getMessage() == "slack call failed"]
        assert [getattr(r, "call") for r in failed] == ["ephemeral", "status_line", "post"]
        assert port.failures == 3


async def test_nothing_is_sent_for_a_thread_whose_lease_is_known_lost(tmp_path: Path) -> None:
    async with FakeSlack() as slack, reply_port(slack.api_url, tmp_path / "outbox.sqlite") as (port, _):
        board = StatusBoard(port, interval=0.0, rate=0.0)
        lines = StatusLines(port, Fallbacks(), interval=0, rate=0)
        status_ts = await board.post("C1", THREAD, SlackMessage(text="Running · 1/9"))
        assert status_ts is not None
        lease = Lease(str(KEY), 4)
        held = HELD.set(lease)
        try:
            board.schedule("C1", status_ts, lambda: SlackMessage(text="Running · 2/9"), priority=Priority.URGENT)
            lines.working(KEY, "Writing artifacts/a.md")
            mark_lost(lease)  # another replica took the thread over before the queued states went out
            messages = [
                Post("C1", THREAD, SlackMessage(text="a reply")),
                Post("C1", THREAD, SlackMessage(text="a status message"), durable=False),
                Edit("C1", status_ts, SlackMessage(text="Completed · 9/9")),
                Ephemeral("C1", "U1", "only you see this", THREAD),
                Reaction("C1", THREAD, "hourglass_flowing_sand"),
                StatusLine("C1", THREAD, "is working…"),
                Title("C1", THREAD, "Create story 1-2"),
            ]
            deliveries = [await port.send(message) for message in messages]
        finally:
            HELD.reset(held)
        assert all(d.fenced and not d.sent for d in deliveries)
        assert await board.idle(WAIT) and await lines.idle(WAIT)
        await port.send(Post("C1", THREAD, SlackMessage(text="said by the thread's owner")))  # no lease: sent
        await slack.wait_for("chat.postMessage", lambda p: p.get("text") == "said by the thread's owner", timeout=WAIT)
        assert thread_texts(slack) == ["Running · 1/9", "said by the thread's owner"]
        sent = [method for method, _ in slack.calls]
        assert "chat.update" not in sent and "assistant.threads.setStatus" not in sent
        assert not {"chat.postEphemeral", "reactions.add", "assistant.threads.setTitle"} & set(sent)
        await board.close()
        await lines.close()
