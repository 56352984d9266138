"""How a streamed reply ends, over the real SDK, the outbox on a file and the fake Slack (which enforces Slack's
limits on streamed messages): a final text that rewrites the middle of the streamed words leaves exactly that
text in the one message, its stream stopped, also when the process is killed between recording and showing
it; a reply longer than one streamed message holds goes on in new messages, whole, once, with no call refused."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from tests.support.fakes import FakeSlack
from tests.support.fakes.slack_api import STREAMED_MESSAGE_LIMIT
from tests.support.processes import Spawner, kill_group
from tests.support.reply_streams import (
    REWRITTEN, STREAMED, live_streams, replies, reply_port, reply_stream, shown, stream_words,
)

WAIT = 60.0


async def test_a_reply_whose_final_text_rewrites_its_middle_ends_as_that_text_in_its_one_message(tmp_path: Path) -> None:
    async with FakeSlack() as slack, reply_port(slack.api_url, tmp_path / "outbox.sqlite") as (port, courier):
        stream = reply_stream(port)
        await stream_words(stream, STREAMED, 20)
        assert shown(replies(slack)[0]) == STREAMED  # the words as the model wrote them, live
        await stream.finish(REWRITTEN)
        assert await courier.idle(WAIT)
        assert [shown(m) for m in replies(slack)] == [REWRITTEN]
        assert not live_streams(slack) and not slack.refusals
        assert await courier.ledger.pending() == []


@pytest.mark.slow  # kill -9 of a process
async def test_a_rewritten_reply_recorded_but_not_shown_when_killed_is_shown_once_from_the_outbox(
    tmp_path: Path, spawn: Spawner
) -> None:
    outbox = tmp_path / "outbox.sqlite"
    async with FakeSlack() as slack:
        for method in ("chat.stopStream", "chat.update"):  # Slack is away once the whole text is known
            slack.fail_next(method, "service_unavailable", status=503, times=10_000)
        process = await spawn(sys.executable, "-m", "tests.support.reply_streams", slack.api_url, str(outbox))
        await slack.wait_for(("chat.stopStream", "chat.postMessage"), timeout=WAIT)
        kill_group(process.pid)
        await asyncio.wait_for(process.wait(), WAIT)
        slack.stop_failing("chat.stopStream")
        slack.stop_failing("chat.update")

        async with reply_port(slack.api_url, outbox) as (_, courier):  # the next start on the same outbox
            assert await courier.idle(WAIT)
            assert [shown(m) for m in replies(slack)] == [REWRITTEN]
            assert not live_streams(slack)
            assert await courier.ledger.pending() == []


def long_reply() -> str:
    """About 2.5 streamed messages of paragraphs, each numbered, with a mention that defusing lengthens."""
    line = "The weekly report lists what was finished, what comes next and the risks, each with <@U2> as owner. "
    return "\n\n".join(f"Part {index:02d}. {line * 6}" for index in range(48))


async def test_a_reply_longer_than_a_streamed_message_holds_goes_on_in_new_messages_whole_and_once(
    tmp_path: Path,
) -> None:
    whole = long_reply()
    assert len(whole) > 2 * STREAMED_MESSAGE_LIMIT
    async with FakeSlack() as slack, reply_port(slack.api_url, tmp_path / "outbox.sqlite") as (port, courier):
        stream = reply_stream(port)
        await stream_words(stream, whole[:-900], 700)  # the last words come only with the whole reply
        await stream.finish(whole)
        assert await courier.idle(WAIT)
        assert not slack.refusals, slack.refusals[:1]
        messages = [shown(m).replace("<\u200b", "<") for m in replies(slack)]
        assert len(messages) == 3 and not live_streams(slack)
        assert all(sum(f"Part {i:02d}." in text for text in messages) == 1 for i in range(48))
        assert [word for text in messages for word in text.split()] == whole.split()  # no word cut in two
        assert all(text.rstrip().endswith(".") for text in messages)  # each message ends at a clean break
        assert await courier.ledger.pending() == []
