"""A stop pressed in the instant a long streamed reply hands over to its next message, end to end (real Bolt
app, FakeSlack, scripted model): the next message's start is held in flight at Slack while the person
stops, so the stop lands exactly at the hand-over (or, likewise, while some words are on their way).
Every message the reply opened ends, none is left looking live, and no words are shown twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.bot_harness import Harness, bot_harness
from tests.support.fakes.slack_api import HeldCall
from tests.support.fakes.slack_events import agent_session_stopped_event
from tests.support.reply_streams import live_streams, long_reply, shown
from tests.support.scripts import script_hello_linear

WAIT = 60.0


def hold_second_message(h: Harness) -> HeldCall:
    """The start of the reply's second streamed message waits at Slack until released."""

    def second(params: dict[str, Any]) -> bool:
        thread = params.get("thread_ts")
        return any(h.slack.messages[key].get("thread_ts") == thread for key in h.slack.streams)

    return h.slack.hold("chat.startStream", second)


async def long_reply_at_its_hand_over(h: Harness, held: HeldCall | None = None) -> tuple[str, HeldCall]:
    """A run whose first answer is a long reply, stopped in the instant its second message starts (or
    `held` is on its way to Slack)."""
    h.llm.piece_chars = 1000
    h.llm.add_reply(long_reply())
    script_hello_linear(h.llm)
    held = held or hold_second_message(h)
    top = await h.mention("hello-linear")
    await held.reached.wait()
    return top, held


def reply_messages(h: Harness, top: str) -> list[str]:
    """What the person reads of the reply, message by message, mentions as the model wrote them."""
    texts = [shown(m).replace("<\u200b", "<") for m in h.thread(top)]
    return [text for text in texts if "Part 00." in text or text.startswith("Part ")]


def shown_once_in_order(messages: list[str]) -> bool:
    """The messages read together are the start of the model's reply (the stop may have cut its last word):
    nothing shown twice, nothing skipped."""
    words, written = [word for text in messages for word in text.split()], long_reply().split()
    return words[:-1] == written[: len(words) - 1] and written[len(words) - 1].startswith(words[-1])


async def ended_whole(h: Harness, top: str, count: int = 2) -> None:
    await h.wait_status(top, "Paused", timeout=WAIT)
    await h.settle()
    messages = reply_messages(h, top)
    assert not live_streams(h.slack), "a message of the stopped reply still looks live"
    assert len(messages) == count and shown_once_in_order(messages), messages
    assert not [c for c in h.slack.refusals if c.params["error"] == "msg_too_long"]


async def test_slacks_stop_at_a_long_replys_hand_over_ends_its_new_message_too(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        top, held = await long_reply_at_its_hand_over(h)
        mark = h.mark()
        assert await h.event(agent_session_stopped_event("C1", top, "U1", streaming_message_ts=[])) == 200
        await h.posted_text("Stopping now", since=mark)  # the model call is cancelled while the start is in flight
        held.release()
        await ended_whole(h, top)


async def test_the_stream_stop_pressed_on_the_full_message_at_its_hand_over_ends_the_new_one_too(
    project: Path,
) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        top, held = await long_reply_at_its_hand_over(h)
        full = next(key for key, state in h.slack.streams.items() if state == "streaming")
        h.slack.stop_stream_by_user(*full)  # the full message still looks live: the person stops it
        held.release()
        await ended_whole(h, top)


async def test_a_stop_typed_while_words_are_on_their_way_to_slack_shows_them_once(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        third = h.slack.hold("chat.appendStream", lambda _: len(h.slack.calls_to("chat.appendStream")) == 3)
        top, held = await long_reply_at_its_hand_over(h, third)
        mark = h.mark()
        await h.reply(top, "*stop")
        await h.posted_text("Stopping now", since=mark)
        held.release()  # Slack takes the words the stopped call carried
        await ended_whole(h, top, count=1)
