"""Slack's Web API goes away while runs work: what a person must read is shown once Slack is back,
exactly once, and a blip never switches a feature (streaming, the status line) off."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.native.fallbacks import STATUS, STREAM
from tests.support.scripts import HELLO_LINEAR_ANSWER, hello_linear_responder
from tests.support.outage_bot import outage_bot

pytestmark = pytest.mark.slow  # waits out real Slack outages (25 s of 503s, 12 s of 429s)

OUTAGE_SECONDS = 25.0
SHOWN_WITHIN = 10.0  # seconds after Slack is back
QUESTION = "What is the topic?"


async def test_a_question_written_during_a_503_outage_is_shown_once_soon_after_slack_is_back(project: Path) -> None:
    async with outage_bot(project, responder=hello_linear_responder()) as h:
        outage = h.slack.fail_everything("unavailable", seconds=OUTAGE_SECONDS)
        top = await h.mention("hello-linear")
        # The run writes its question while every Web API call answers 503.
        await h.slack.wait_for("chat.postMessage", lambda p: QUESTION in str(p.get("text")) + str(p.get("blocks")))
        assert not h.shown(top, QUESTION) and time.monotonic() < outage.until
        back = outage.until
        shown_at = await h.until_shown(top, QUESTION, timeout=SHOWN_WITHIN + 20)
        delay = shown_at - back
        print(f"question shown {delay:.1f} s after Slack was back")
        assert delay <= SHOWN_WITHIN
        assert len(h.shown(top, QUESTION)) == 1

        assert h.bot is not None and h.bot.dispatcher.surface is not None
        fallbacks = h.bot.dispatcher.surface.fallbacks
        key = str(ThreadKey("T1", "C1", top))
        assert fallbacks.allows(key, STREAM) and fallbacks.allows(key, STATUS) and fallbacks.count == 0

        mark = len(h.slack.calls)
        assert await h.reply(top, HELLO_LINEAR_ANSWER) == 200
        await h.until_shown(top, "completed.")
        await h.settle()
        methods = {call.method for call in h.slack.calls[mark:]}
        assert "assistant.threads.setStatus" in methods  # the status line is still used
        assert "chat.startStream" in methods  # and replies still stream
        assert len(h.shown(top, QUESTION)) == 1 and len(h.shown(top, "completed.")) == 1


async def test_a_completion_during_429s_is_shown_once_and_no_method_is_asked_again_before_retry_after(
    project: Path,
) -> None:
    async with outage_bot(project, responder=hello_linear_responder()) as h:
        top = await h.mention("hello-linear")
        await h.until_shown(top, QUESTION)
        await h.settle()
        outage = h.slack.fail_everything("ratelimited", seconds=12.0, retry_after=8)
        first = len(h.slack.calls)
        assert await h.reply(top, HELLO_LINEAR_ANSWER) == 200
        shown_at = await h.until_shown(top, "completed.", timeout=60)
        await h.settle()
        print(f"completion shown {shown_at - outage.until:.1f} s after the 429s ended")
        assert len(h.shown(top, "completed.")) == 1
        assert outage.answered, "the run's calls met the 429s"
        calls = list(zip(h.slack.calls[first:], h.slack.call_times[first:]))
        for method, refused_at in outage.answered:
            too_soon = [at - refused_at for (m, _), at in calls if m == method and refused_at < at < refused_at + 8.0]
            assert not too_soon, f"{method} asked again {min(too_soon):.2f} s after a 429 with Retry-After: 8"
