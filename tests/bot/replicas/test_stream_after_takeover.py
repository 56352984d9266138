"""Two replicas on one Postgres; the one streaming a reply into a thread is killed with SIGKILL and stays
down: the other takes the thread over when its lease runs out and the person sees the whole reply exactly
once (the cut-off stream finished, or edited to the whole text, never a fragment, a second copy or a
stream left looking live); Slack delivering the event again afterwards does nothing; and the killed
replica, started again, sends nothing more to that thread."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.bot_harness import message_text
from tests.support.fakes import Reply
from tests.support.fakes.slack_api import STREAMED
from tests.support.processes import kill_group
from tests.support.replica_cluster import WAIT, Cluster, Replica, cluster
from tests.support.scripts import HELLO_LINEAR_ANSWER, Body, user_inputs
from tests.support.stream_checks import (
    ANSWER, CLOSING, QUESTION, assert_shown_once, closing_responder, last_user_text, replies_in,
)

pytestmark = pytest.mark.slow  # two serve processes on a real Postgres, one killed mid-stream

LATER = "Anything else to add?"


def slow(c: Cluster, responder: Any) -> None:
    """The model writes in small pieces, slowly enough to kill a replica in the middle of a reply."""
    c.llm.responder, c.llm.piece_chars, c.llm.piece_interval = responder, 12, 0.15


async def kill_mid_stream(c: Cluster, top: str, text: str, since: int) -> tuple[Replica, int, dict[str, Any]]:
    """Once half of `text` is shown (its stream has lived longer than a lease), SIGKILL the replica holding
    the thread; returns it, the index of the one left, and the cut-off message, checked to be a live fragment."""

    def half_shown(params: dict[str, Any]) -> bool:
        return any(len(message_text(m)) >= len(text) // 2 for m in replies_in(c.slack, top, text))

    await c.slack.wait_for(("chat.appendStream", "chat.update"), half_shown, since=since, timeout=WAIT)
    victim = await kill_holder(c, top)
    (cut,) = replies_in(c.slack, top, text)
    assert text not in message_text(cut) and c.slack.streams.get(("C1", cut["ts"])) == "streaming", message_text(cut)
    return victim, next(r.index for r in c.replicas if r is not victim), cut


async def nothing_more_from_restart(c: Cluster, top: str, victim: Replica, cut: dict[str, Any], text: str) -> None:
    """Start the killed replica again, send a later message through it and wait for its answer: from the
    restart on, nothing in the thread touches the cut-off reply or shows its text again."""
    since = len(c.slack.calls)
    await c.restart(victim.index)
    await c.reply(top, LATER, via=victim.index)
    await c.posted(lambda p: p.get("thread_ts") == top and "Noted" in message_text(p), since=since)
    touched = [
        (call.method, message_text(call.params)[:80])
        for call in c.slack.calls[since:]
        if c.shows_in_thread(top, call.params)
        and (call.params.get("ts") == cut["ts"] or text[:40] in message_text(call.params)
             or "restart" in message_text(call.params))
    ]
    assert not touched, touched
    assert_shown_once(c.slack, top, text)


async def kill_holder(c: Cluster, top: str) -> Replica:
    """SIGKILL the replica holding thread `top`; it stays down."""
    holder = await c.holder(top)
    victim = next(r for r in c.replicas if r.id == holder)
    kill_group(victim.process.pid)
    await victim.process.wait()
    return victim


async def open_chat(c: Cluster) -> tuple[ChatModel, str]:
    """A plain chat thread opened through replica 0, with the chat model answering in it."""
    model = ChatModel()
    c.llm.responder = model
    top = await c.mention("chat", via=0)
    await c.posted(lambda p: p.get("thread_ts") == top and "Plain chat" in message_text(p))
    return model, top


class ChatModel:
    """Answers QUESTION with ANSWER, counting how often it was asked, and anything else with a short note."""

    def __init__(self) -> None:
        self.asked = 0

    def __call__(self, body: Body) -> Reply:
        if QUESTION in last_user_text(body):
            self.asked += 1
            return Reply(content=ANSWER)
        return Reply(content=f"Noted: {last_user_text(body)[-40:]}")


async def test_a_chat_reply_cut_by_kill_9_is_finished_once_by_the_replica_that_takes_the_thread_over(
    database_url: str, project: Path, tmp_path: Path
) -> None:
    async with cluster(database_url, project, tmp_path, mode="http", package="multi-workflows") as c:
        model = ChatModel()
        slow(c, model)
        top = await c.mention("chat", via=0)
        await c.posted(lambda p: p.get("thread_ts") == top and "Plain chat" in message_text(p))
        since = len(c.slack.calls)
        envelope = await c.reply(top, QUESTION, via=0)
        victim, survivor, cut = await kill_mid_stream(c, top, ANSWER, since)
        killed = time.monotonic()
        await c.slack.wait_for(("chat.update", STREAMED), lambda p: ANSWER in message_text(p), since=since, timeout=WAIT)
        print(f"the whole reply was shown {time.monotonic() - killed:.1f} s after the kill")
        await c.event({**envelope, "retry_attempt": 1}, via=survivor)  # Slack delivers the question again
        since = len(c.slack.calls)
        await c.reply(top, "Thanks.", via=survivor)  # answered after the redelivery was looked at
        await c.posted(lambda p: p.get("thread_ts") == top and "Noted" in message_text(p), since=since)
        assert_shown_once(c.slack, top, ANSWER)
        assert model.asked == 2, "asked by the killed replica, then once by the one that took the thread over"

        await nothing_more_from_restart(c, top, victim, cut, ANSWER)
        assert model.asked == 2


async def test_a_chat_reply_killed_as_slack_opens_its_message_is_finished_once_in_that_message_by_the_new_holder(
    database_url: str, project: Path, tmp_path: Path
) -> None:
    async with cluster(database_url, project, tmp_path, mode="http", package="multi-workflows") as c:
        model, top = await open_chat(c)
        since = len(c.slack.calls)
        opening = c.slack.hold("chat.startStream", lambda p: p.get("thread_ts") == top)
        await c.reply(top, QUESTION, via=0)
        await asyncio.wait_for(opening.reached.wait(), WAIT)
        await kill_holder(c, top)
        opening.release()  # Slack opens the message: the killed replica never heard of it
        await asyncio.wait_for(opening.done.wait(), WAIT)
        opened = [ts for (channel, ts), state in c.slack.streams.items()
                  if state == "streaming" and c.slack.messages[(channel, ts)].get("thread_ts") == top]
        assert len(opened) == 1

        await c.slack.wait_for(("chat.update", STREAMED), lambda p: ANSWER in message_text(p), since=since, timeout=WAIT)
        assert_shown_once(c.slack, top, ANSWER)
        assert replies_in(c.slack, top, ANSWER)[0]["ts"] == opened[0], "written into the message Slack opened"
        assert model.asked == 2, "asked by the killed replica, then once by the one that took the thread over"


async def test_a_reply_recorded_whole_but_not_shown_is_finished_by_the_new_holder_without_asking_again(
    database_url: str, project: Path, tmp_path: Path
) -> None:
    async with cluster(database_url, project, tmp_path, mode="http", package="multi-workflows") as c:
        model, top = await open_chat(c)
        c.slack.fail_next("chat.stopStream", "service_unavailable", status=503, times=10_000)
        since = len(c.slack.calls)
        await c.reply(top, QUESTION, via=0)
        await c.slack.wait_for("chat.stopStream", since=since, timeout=WAIT)  # the whole text is recorded; Slack is away
        victim = await kill_holder(c, top)
        c.slack.stop_failing("chat.stopStream")

        await c.slack.wait_for(("chat.update", STREAMED), lambda p: ANSWER in message_text(p), since=since, timeout=WAIT)
        since = len(c.slack.calls)
        survivor = next(r.index for r in c.replicas if r is not victim)
        await c.reply(top, "Thanks.", via=survivor)  # answered after the question's event was looked at again
        await c.posted(lambda p: p.get("thread_ts") == top and "Noted" in message_text(p), since=since)
        assert_shown_once(c.slack, top, ANSWER)
        assert model.asked == 1, "the reply recorded whole was finished, not asked for again"


async def test_a_runs_closing_text_cut_by_kill_9_is_finished_once_by_the_replica_that_takes_the_thread_over(
    database_url: str, project: Path, tmp_path: Path
) -> None:
    async with cluster(database_url, project, tmp_path, mode="http", package="multi-workflows") as c:
        slow(c, closing_responder(later=LATER))
        top = await c.mention("hello-linear", via=0)
        await c.posted(lambda p: p.get("thread_ts") == top and "What is the topic" in message_text(p))
        since = len(c.slack.calls)
        await c.reply(top, HELLO_LINEAR_ANSWER, via=0)
        victim, _, cut = await kill_mid_stream(c, top, CLOSING, since)
        killed = time.monotonic()
        await c.slack.wait_for(("chat.update", STREAMED), lambda p: CLOSING in message_text(p), since=since, timeout=WAIT)
        print(f"the whole closing text was shown {time.monotonic() - killed:.1f} s after the kill")
        assert_shown_once(c.slack, top, CLOSING)
        assert all(user_inputs(body).count(HELLO_LINEAR_ANSWER) <= 1 for body in c.llm.requests)  # taken once

        await nothing_more_from_restart(c, top, victim, cut, CLOSING)
