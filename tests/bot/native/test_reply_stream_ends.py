"""How a streamed reply ends, over the real SDK, the outbox on a file and the fake Slack (which enforces Slack's
limits on streamed messages): a final text that rewrites the middle of the streamed words leaves exactly that
text in the one message, its stream stopped, also when the process is killed between recording and showing
it; a reply longer than one streamed message holds goes on in new messages, whole, once, with no call refused."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakes import FakeSlack
from tests.support.fakes.slack_api import STREAMED_MESSAGE_LIMIT
from tests.support.processes import Spawner, kill_group
from tests.support.reply_streams import (
    REWRITTEN, STREAMED, each_once, live_streams, long_reply, replies, reply_port, reply_stream, shown, stream_words,
)

WAIT = 60.0


async def test_a_reply_whose_final_text_rewrites_its_middle_ends_as_that_text_in_its_one_message(
    tmp_path: Path,
) -> None:
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
        whole_known = slack.wait_for(("chat.stopStream", "chat.postMessage"), timeout=WAIT)
        await _killed_when(spawn, slack, outbox, "rewrite", whole_known)
        slack.stop_failing("chat.stopStream")
        slack.stop_failing("chat.update")

        async with reply_port(slack.api_url, outbox) as (_, courier):  # the next start on the same outbox
            assert await courier.idle(WAIT)
            assert [shown(m) for m in replies(slack)] == [REWRITTEN]
            assert not live_streams(slack)
            assert await courier.ledger.pending() == []


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
        assert each_once(messages)
        assert [word for text in messages for word in text.split()] == whole.split()  # no word cut in two
        assert all(text.rstrip().endswith(".") for text in messages)  # each message ends at a clean break
        assert await courier.ledger.pending() == []


def in_second_message(slack: FakeSlack, params: dict[str, Any]) -> bool:
    shown_now = replies(slack)
    return len(shown_now) > 1 and params.get("ts") == shown_now[1]["ts"]


@pytest.mark.slow  # kill -9 of a process
async def test_a_long_reply_killed_in_its_second_message_is_written_again_over_all_its_messages_once(
    tmp_path: Path, spawn: Spawner
) -> None:
    outbox = tmp_path / "outbox.sqlite"
    async with FakeSlack() as slack:
        # The second message is recorded before its second piece goes out.
        second = slack.wait_for("chat.appendStream", lambda p: in_second_message(slack, p), timeout=WAIT)
        await _killed_when(spawn, slack, outbox, "long", second)
        assert len(replies(slack)) == 2 and live_streams(slack)

        async with reply_port(slack.api_url, outbox) as (port, courier):  # the next start on the same outbox
            assert await courier.settle_streams() == 1 and not live_streams(slack)
            redo = reply_stream(port)  # the reply asked for again writes into the messages it has
            await stream_words(redo, long_reply("Step"), 700)
            await redo.finish(long_reply("Step"))
            assert await courier.idle(WAIT)
            messages = [shown(m).replace("<\u200b", "<") for m in replies(slack)]
            assert each_once(messages, "Step") and not any("Part 00." in text for text in messages), messages
            assert len(messages) == 3 and not live_streams(slack)
            assert not [c for c in slack.refusals if c.params["error"] == "msg_too_long"]
            assert await courier.ledger.pending() == []


@pytest.mark.slow  # kill -9 of a process
async def test_a_reply_killed_as_slack_opens_its_message_is_written_again_into_that_message_once(
    tmp_path: Path, spawn: Spawner
) -> None:
    outbox = tmp_path / "outbox.sqlite"
    async with FakeSlack() as slack:
        opening = slack.hold("chat.startStream")
        await _killed_when(spawn, slack, outbox, "rewrite", opening.reached.wait())
        opening.release()  # Slack opens the message: the process never hears of it
        await asyncio.wait_for(opening.done.wait(), WAIT)
        assert len(replies(slack)) == 1 and live_streams(slack)

        async with reply_port(slack.api_url, outbox) as (port, courier):  # the next start on the same outbox
            assert await courier.settle_streams() == 1 and not live_streams(slack)
            redo = reply_stream(port)  # the reply asked for again writes into that message
            await stream_words(redo, STREAMED, 20)
            await redo.finish(REWRITTEN)
            assert await courier.idle(WAIT)
            assert [shown(m) for m in replies(slack)] == [REWRITTEN]
            assert not live_streams(slack)
            assert await courier.ledger.pending() == []


async def _killed_when(spawn: Spawner, slack: FakeSlack, outbox: Path, case: str, moment: Awaitable[Any]) -> None:
    """A reply streamed by a process of its own (tests.support.reply_streams `case`), killed -9 at `moment`."""
    argv = (sys.executable, "-m", "tests.support.reply_streams", slack.api_url, str(outbox))
    process = await spawn(*argv, case)
    await moment
    kill_group(process.pid)
    await asyncio.wait_for(process.wait(), WAIT)
