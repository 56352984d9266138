"""Event handling: duplicates, ordering, parallel threads, ignored traffic, interrupts and the run cap."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.support.fakes import Reply
from tests.support.fakes.slack_events import app_mention_event, deliver_event, message_event, new_ts
from tests.support.scripts import HELLO_LINEAR_ANSWER, script_hello_linear, user_inputs
from tests.support.bot_harness import SECRET, artifact_paths, bot_harness, hold_next_model_call, message_text


async def _sentinel(h, text: str = "Mary") -> str:
    """A fresh thread whose reply proves every earlier delivery has been looked at."""
    ts = await h.mention(text, channel="C9")
    await h.posted(lambda p: p.get("channel") == "C9" and p.get("thread_ts") == ts)
    await h.settle()
    return ts


async def test_slack_retries_of_one_event_are_handled_once(project: Path) -> None:
    async with bot_harness(project) as h:
        envelope = app_mention_event("<@UBOT>", ts=new_ts())
        assert (await deliver_event(h.http, h.url, SECRET, envelope))[0] == 200
        assert (await deliver_event(h.http, h.url, SECRET, envelope, retry_num=1))[0] == 200
        await h.posted_text("These agents are available")
        await _sentinel(h)
        greetings = [p for p in h.slack.calls_to("chat.postMessage") if p.get("channel") == "C1"]
        assert len(greetings) == 1


async def test_app_mention_and_message_for_one_mention_give_one_reply(project: Path) -> None:
    async with bot_harness(project) as h:
        ts = new_ts()
        # Top level: message.channels arrives too, with its own event_id; only app_mention counts.
        await h.event(message_event("<@UBOT>", ts=ts))
        await h.event(app_mention_event("<@UBOT>", ts=ts))
        await h.posted_text("These agents are available")
        # Inside the thread: both events for one mention, in either order.
        reply_ts = new_ts()
        await h.event(message_event("<@UBOT> Bob", ts=reply_ts, thread_ts=ts))
        await h.event(app_mention_event("<@UBOT> Bob", ts=reply_ts, thread_ts=ts))
        await h.posted_text("[1] Create the next story")
        await _sentinel(h)
        in_thread = [p for p in h.slack.calls_to("chat.postMessage") if p.get("thread_ts") == ts]
        assert len(in_thread) == 2  # the greeting and Bob's menu, once each


async def test_a_delivery_seen_before_a_restart_is_not_processed_again(project: Path) -> None:
    async with bot_harness(project) as h:
        envelope = app_mention_event("<@UBOT>", ts=new_ts())
        await h.event(envelope)
        await h.posted_text("These agents are available")
        await h.settle()
        await h.restart(grace=1.0)
        await h.event(envelope)  # Slack retrying into the new process
        await _sentinel(h)
        assert len([p for p in h.slack.calls_to("chat.postMessage") if p.get("channel") == "C1"]) == 1


async def test_own_messages_edits_and_threads_without_a_session_are_ignored(project: Path) -> None:
    async with bot_harness(project) as h:
        top = await h.mention("")
        await h.posted_text("These agents are available")
        await h.event(message_event("Bob", thread_ts=top, user="UBOT", bot_id="BBOT", subtype="bot_message"))
        await h.event(message_event("Bob", thread_ts=top, user=None, bot_id="B2", subtype="bot_message"))
        await h.event(message_event("Bob", thread_ts=top, subtype="message_changed"))
        await h.event(message_event("Bob", thread_ts=top, subtype="message_deleted"))
        await h.event(message_event("Bob", thread_ts=new_ts()))  # someone else's thread
        await h.event(message_event("Bob"))  # plain channel chatter
        await _sentinel(h)
        assert len([p for p in h.slack.calls_to("chat.postMessage") if p.get("channel") == "C1"]) == 1


async def test_threads_run_in_parallel_and_each_thread_in_order(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        a = await h.mention("Mary")
        b = await h.mention("Mary")
        await h.settle()
        both_waiting = asyncio.Event()
        arrived: list[str] = []

        async def respond(body):
            question = user_inputs(body)[-1] if user_inputs(body) else str(body["messages"][-1]["content"])
            arrived.append(question)
            if len(arrived) == 2:
                both_waiting.set()
            if "parallel" in question:
                # Both threads' model calls must be in flight at once, or this never fires.
                await asyncio.wait_for(both_waiting.wait(), 5)
            return Reply(content=f"answer to: {question.splitlines()[-1]}")

        h.llm.responder = respond
        mark = h.mark()
        await h.reply(a, "parallel A")
        await h.reply(b, "parallel B")
        await h.posted_text("answer to: parallel A", since=mark)
        await h.posted_text("answer to: parallel B", since=mark)

        mark = h.mark()
        for n in range(1, 4):
            await h.reply(a, f"in order {n}")
        await h.posted_text("answer to: in order 3", since=mark)
        await h.settle()
        answers = [m for m in h.thread(a) if "answer to: in order" in message_text(m)]
        assert [message_text(m).count(f"in order {n}") > 0 for n, m in zip((1, 2, 3), answers)] == [True, True, True]


async def test_replies_while_pumping_get_a_note_and_reach_the_run_after_it_stops(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        script_hello_linear(h.llm)
        gate = hold_next_model_call(h)
        top = await h.mention("hello-linear")
        await h.llm.wait_for_requests(1)  # the run is inside its (held) model call
        mark = h.mark()
        await h.reply(top, HELLO_LINEAR_ANSWER)
        note = await h.ephemeral("Still working on the run", since=mark)
        assert note["user"] == "U1" and note["thread_ts"] == top
        gate.set()
        done = await h.posted_text("completed.", since=mark)
        assert "artifacts/hello-linear/result.md" in artifact_paths(done)


async def test_typed_pause_acts_at_once_and_resume_button_continues(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        script_hello_linear(h.llm)
        top = await h.mention("hello-linear")
        await h.posted_text("What is the topic?")
        await h.wait_status(top, "Waiting for your reply")
        gate = hold_next_model_call(h)
        mark = h.mark()
        await h.reply(top, HELLO_LINEAR_ANSWER)
        await h.llm.wait_for_requests(2)
        await h.reply(top, "*pause", user="U2")  # not U1's to pause
        await h.ephemeral("belongs to <@U1>", since=mark, user="U2")
        await h.reply(top, "*pause")
        # The notice comes while the model call is still held, not after it.
        await h.posted_text("Pausing after the current step", since=mark)
        assert not gate.is_set()
        gate.set()
        await h.wait_status(top, "Paused")
        resume, status = h.button(top, "Resume")
        mark = h.mark()
        await h.click(resume, status)
        await h.posted_text("completed.", since=mark)


async def test_stop_button_interrupts_a_slow_model_call(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        script_hello_linear(h.llm)
        top = await h.mention("hello-linear")
        await h.wait_status(top, "Waiting for your reply")
        gate = hold_next_model_call(h)  # never released: only Stop ends this call
        await h.reply(top, HELLO_LINEAR_ANSWER)
        await h.llm.wait_for_requests(2)
        await h.wait_status(top, "Running")
        stop, status = h.button(top, "Stop")
        mark = h.mark()
        await h.click(stop, status, user="U2")  # someone else's run: refused, and it keeps running
        await h.ephemeral("belongs to <@U1>", since=mark, user="U2")
        await h.click(stop, status)
        await h.posted_text("Stopping now", since=mark)
        await h.wait_status(top, "Paused")
        assert len(h.llm.requests) == 2 and not gate.is_set()
        gate.set()  # let the abandoned server-side call end before the fake stops


async def test_run_cap_shows_queued_work_on_the_status_message(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"], max_runs=1) as h:
        script_hello_linear(h.llm)
        waiting = await h.mention("hello-linear")
        await h.wait_status(waiting, "Waiting for your reply")
        gate = hold_next_model_call(h)
        busy = await h.mention("hello-linear")
        await h.llm.wait_for_requests(2)
        mark = h.mark()
        await h.reply(waiting, HELLO_LINEAR_ANSWER)
        await h.wait_status(waiting, "Queued")
        gate.set()
        done = await h.posted(lambda p: p.get("thread_ts") == waiting and "completed." in message_text(p), since=mark)
        assert "artifacts/hello-linear/result.md" in artifact_paths(done)
