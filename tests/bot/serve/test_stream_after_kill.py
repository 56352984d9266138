"""`crewagent serve` without a database, killed with SIGKILL while a reply streams into its thread: after a
restart on the same home the thread shows the whole reply exactly once, in one message, and no stream
is left looking live (every chat.startStream was stopped, or its message edited to the whole text)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.support.bot_harness import message_text
from tests.support.fakes import FakeSlack, ScriptedLLM
from tests.support.fakes.slack_api import STREAMED
from tests.support.fakes.slack_events import app_mention_event, deliver_event, message_event, new_ts
from tests.support.processes import Spawner, kill_group, wait_healthy
from tests.support.scripts import HELLO_LINEAR_ANSWER, Body, user_inputs
from tests.support.serve_process import SECRET, start_serve
from tests.support.stream_checks import (
    ANSWER, CLOSING, QUESTION, asked, assert_shown_once, closing_responder, replies_in,
)

pytestmark = pytest.mark.slow  # kill -9 of serve

WAIT = 60.0


def slow_llm(responder: Any) -> ScriptedLLM:
    """A model that writes its text in small pieces, slowly enough to be killed in the middle of a reply."""
    return ScriptedLLM(responder=responder, piece_chars=12, piece_interval=0.15)


async def ask(slack: FakeSlack, http: aiohttp.ClientSession, events: str, top: str, question: str) -> None:
    question_ts = new_ts()
    slack.add_message("C1", question, ts=question_ts, thread_ts=top)
    assert (await deliver_event(http, events, SECRET, message_event(question, ts=question_ts, thread_ts=top)))[0] == 200


async def open_chat(slack: FakeSlack, http: aiohttp.ClientSession, events: str, question: str = QUESTION) -> str:
    """A thread in plain chat, and the owner's question in it; returns the thread's ts."""
    top = new_ts()
    slack.add_message("C1", "<@UBOT> chat", ts=top)
    assert (await deliver_event(http, events, SECRET, app_mention_event("<@UBOT> chat", ts=top)))[0] == 200
    await slack.wait_for("chat.postMessage", lambda p: "Plain chat" in message_text(p), timeout=WAIT)
    await ask(slack, http, events, top, question)
    return top


async def test_a_chat_reply_cut_by_kill_9_is_written_whole_into_its_message_after_the_restart(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    home = tmp_path / "home"
    async with FakeSlack() as slack, slow_llm(lambda body: ANSWER) as llm, aiohttp.ClientSession() as http:
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        since = len(slack.calls)
        top = await open_chat(slack, http, f"http://127.0.0.1:{port}/slack/events")
        await slack.wait_for("chat.appendStream", since=since, timeout=WAIT)  # the first pieces are shown
        kill_group(process.pid)
        await asyncio.wait_for(process.wait(), WAIT)
        assert not slack.calls_to(STREAMED) and ANSWER not in message_text(replies_in(slack, top, ANSWER)[0])

        since = len(slack.calls)
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        restarted = time.monotonic()
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        await slack.wait_for(("chat.update", STREAMED), lambda p: ANSWER in message_text(p), since=since, timeout=WAIT)
        print(f"the whole reply was shown {time.monotonic() - restarted:.1f} s after the restart")
        assert_shown_once(slack, top, ANSWER)
        assert asked(llm, QUESTION) == 2  # the cut-off reply was asked for again, once
        kill_group(process.pid)


async def test_a_reply_recorded_whole_but_not_shown_is_finished_after_kill_9_without_asking_the_model_again(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    home = tmp_path / "home"
    async with FakeSlack() as slack, slow_llm(lambda body: ANSWER) as llm, aiohttp.ClientSession() as http:
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        slack.fail_next("chat.stopStream", "service_unavailable", status=503, times=10_000)
        since = len(slack.calls)
        top = await open_chat(slack, http, f"http://127.0.0.1:{port}/slack/events")
        await slack.wait_for("chat.stopStream", since=since, timeout=WAIT)  # the whole text is known; Slack is away
        kill_group(process.pid)
        await asyncio.wait_for(process.wait(), WAIT)
        slack.stop_failing("chat.stopStream")

        since = len(slack.calls)
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        restarted = time.monotonic()
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        await slack.wait_for(("chat.update", STREAMED), lambda p: ANSWER in message_text(p), since=since, timeout=WAIT)
        print(f"the whole reply was shown {time.monotonic() - restarted:.1f} s after the restart")
        assert_shown_once(slack, top, ANSWER)
        assert asked(llm, QUESTION) == 1
        kill_group(process.pid)


async def test_a_runs_closing_text_cut_by_kill_9_is_written_whole_into_its_message_after_the_restart(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    home = tmp_path / "home"
    async with FakeSlack() as slack, slow_llm(closing_responder()) as llm, aiohttp.ClientSession() as http:
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        events = f"http://127.0.0.1:{port}/slack/events"
        top = new_ts()
        slack.add_message("C1", "<@UBOT> hello-linear", ts=top)
        assert (await deliver_event(http, events, SECRET, app_mention_event("<@UBOT> hello-linear", ts=top)))[0] == 200
        await slack.wait_for(STREAMED, lambda p: "What is the topic" in message_text(p), timeout=WAIT)
        answer_ts = new_ts()
        slack.add_message("C1", HELLO_LINEAR_ANSWER, ts=answer_ts, thread_ts=top)
        since = len(slack.calls)
        answer = message_event(HELLO_LINEAR_ANSWER, ts=answer_ts, thread_ts=top)
        assert (await deliver_event(http, events, SECRET, answer))[0] == 200
        start = await slack.wait_for("chat.startStream", lambda p: "The workflow" in str(p), since=since, timeout=WAIT)
        await slack.wait_for("chat.appendStream", lambda p: p.get("ts") is not None, since=since, timeout=WAIT)
        kill_group(process.pid)
        await asyncio.wait_for(process.wait(), WAIT)
        assert start and CLOSING not in message_text(replies_in(slack, top, CLOSING)[0])

        since = len(slack.calls)
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        restarted = time.monotonic()
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        await slack.wait_for(("chat.update", STREAMED), lambda p: CLOSING in message_text(p), since=since, timeout=WAIT)
        print(f"the whole reply was shown {time.monotonic() - restarted:.1f} s after the restart")
        assert_shown_once(slack, top, CLOSING)
        assert all(user_inputs(body).count(HELLO_LINEAR_ANSWER) <= 1 for body in llm.requests)  # taken once
        kill_group(process.pid)



LONG_QUESTIONS = {"Write the weekly report handbook.": "Part", "Now write the planning handbook.": "Step"}


def long_answer(word: str) -> str:
    """About 16,000 characters: more than one Slack message (streamed or posted) holds (12,000), so shown in
    two parts. Its blank at the end is streamed too: the reply, whole, comes without it."""
    line = "The weekly report lists what was finished, what comes next and the risks, each with an owner. " * 7
    return "\n\n".join(f"{word} {index:02d}. {line}" for index in range(24))


def whole_once(slack: FakeSlack, top: str, word: str) -> bool:
    """Each paragraph of the long reply is in exactly one message of the thread, and no restart note is left."""
    shown = [message_text(m) for m in slack.messages.values() if m.get("thread_ts") == top and m.get("user") == "UBOT"]
    once = all(sum(f"{word} {index:02d}." in text for text in shown) == 1 for index in range(24))
    return once and not any("interrupted by a restart" in text for text in shown)


async def test_long_replies_are_shown_whole_in_their_parts_once_and_a_finished_one_is_left_be_after_kill_9(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    home = tmp_path / "home"
    def respond(body: Body) -> str:
        asked_last = [m for m in body["messages"] if m.get("role") == "user"][-1]
        return long_answer(next(word for question, word in LONG_QUESTIONS.items() if question in str(asked_last)))

    llm = ScriptedLLM(responder=respond, piece_chars=400, piece_interval=0.1)
    first, second = LONG_QUESTIONS
    async with FakeSlack() as slack, llm, aiohttp.ClientSession() as http:
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        top = await open_chat(slack, http, f"http://127.0.0.1:{port}/slack/events", first)
        done = await slack.wait_for(STREAMED, lambda p: "Part 23." in message_text(p), timeout=WAIT)  # whole, in one stream
        since = len(slack.calls)
        await ask(slack, http, f"http://127.0.0.1:{port}/slack/events", top, second)
        await slack.wait_for("chat.appendStream", lambda p: "Step 10." in str(p), since=since, timeout=WAIT)
        kill_group(process.pid)
        await asyncio.wait_for(process.wait(), WAIT)
        assert not whole_once(slack, top, "Step")

        since = len(slack.calls)
        process, port = await start_serve(spawn, project, home, slack.api_url, llm.base_url)
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
        methods = ("chat.postMessage", "chat.update", STREAMED)
        await slack.wait_for(methods, lambda p: whole_once(slack, top, "Step"), since=since, timeout=WAIT)
        assert not [c.method for c in slack.calls[since:] if c.params.get("ts") == done["ts"]]  # the finished one is left be
        assert whole_once(slack, top, "Part")
        assert not [key for key, state in slack.streams.items() if state == "streaming"]
        assert not [c for c in slack.refusals if c.params["error"] == "msg_too_long"]  # kept to Slack's limits
        assert asked(llm, second) == 2
        kill_group(process.pid)
