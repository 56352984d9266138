"""Slack's agent session of a thread, end to end: its status while the bot works, waits and is dismissed,
its name, Slack's own Stop, and a workspace that refuses the methods. Real Bolt app, FakeSlack (which
grants only manifest.yml's scopes), scripted model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.bot_harness import Harness, bot_harness, hold_next_model_call, message_text
from tests.support.fakes.slack_events import agent_session_stopped_event
from tests.support.scripts import (
    HELLO_LINEAR_ANSWER,
    STORY_KEY,
    calls,
    script_create_story,
    script_hello_linear,
)

SESSION_METHODS = ("agents.sessions.setStatus", "agents.sessions.rename")


def session_calls(h: Harness, thread_ts: str, since: int = 0) -> list[tuple[str, dict[str, Any]]]:
    """The thread's agent session calls, oldest first, as (what, detail): a status or the new name."""
    found = []
    for method, params in h.slack.calls[since:]:
        if method in SESSION_METHODS and params.get("thread_ts") == thread_ts:
            assert params["channel_id"] == "C1"
            found.append((params.get("status", "rename"), params))
    return found


async def test_the_session_is_processing_while_the_bot_works_active_while_it_asks_and_closed_on_dismiss(
    project: Path,
) -> None:
    async with bot_harness(project) as h:
        script_create_story(h.llm)
        top = await h.mention("create-story")
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()

        calls = session_calls(h, top)
        assert [what for what, _ in calls] == ["processing", "rename", "active"]
        assert calls[0][1]["title"] == "create-story"  # the session Slack creates is named at once
        assert "Create Story" in calls[1][1]["title"] and "Bob" in calls[1][1]["title"]  # then after the run
        assert "title" not in calls[2][1]

        mark = h.mark()
        await h.reply(top, STORY_KEY)
        await h.posted_text("completed.", since=mark)
        await h.settle()
        assert [what for what, _ in session_calls(h, top, mark)] == ["processing", "active"]

        mark = h.mark()
        await h.reply(top, "*dismiss")
        await h.posted_text("Left the completed run", since=mark)
        await h.settle()
        assert [what for what, _ in session_calls(h, top, mark)] == ["closed"]
        assert h.slack.sessions[("C1", top)]["status"] == "closed"


async def test_a_reply_streamed_while_the_bot_keeps_working_leaves_the_session_processing(project: Path) -> None:
    async with bot_harness(project) as h:
        script_create_story(h.llm)
        h.llm.add_responder(lambda body: calls(("fs_list", {"path": "@project"}), content="Looking around first."))
        gate = hold_next_model_call(h)
        top = await h.mention("create-story")
        await h.posted_text("Looking around first.")  # streamed, then finished: Slack sets the session active
        await h.llm.wait_for_requests(2)
        await h.slack.wait_for(
            "agents.sessions.setStatus", lambda p: p["status"] == "processing" and "title" not in p
        )
        assert h.slack.sessions[("C1", top)]["status"] == "processing"  # the bot still works: Stop stays
        gate.set()
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        assert h.slack.sessions[("C1", top)]["status"] == "active"


async def test_slacks_stop_stops_the_running_run_and_the_session_leaves_processing(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        script_hello_linear(h.llm)
        top = await h.mention("hello-linear")
        await h.wait_status(top, "Waiting for your reply")
        gate = hold_next_model_call(h)  # never released: only a stop ends this call
        mark = h.mark()
        await h.reply(top, HELLO_LINEAR_ANSWER)
        await h.llm.wait_for_requests(2)
        await h.wait_status(top, "Running")
        await h.slack.wait_for("agents.sessions.setStatus", lambda p: p["status"] == "processing", since=mark)

        mark = h.mark()
        envelope = agent_session_stopped_event("C1", top, "U1", streaming_message_ts=[])
        assert await h.event(envelope) == 200  # acknowledged: Slack does not deliver it again
        await h.posted_text("Stopping now", since=mark)
        await h.wait_status(top, "Paused")
        await h.settle()
        assert len(h.llm.requests) == 2 and not gate.is_set()
        assert [what for what, _ in session_calls(h, top, mark)][0] == "active"  # at once, not after the pump
        assert h.slack.sessions[("C1", top)]["status"] == "active"

        mark = h.mark()
        assert await h.event(envelope) == 200  # Slack's retry of the same delivery: handled once
        await h.settle()
        assert not [p for m, p in h.slack.calls[mark:] if m == "chat.postMessage" and "Stopping" in message_text(p)]
        gate.set()  # let the abandoned server-side call end before the fake stops


async def test_a_workspace_that_refuses_sessions_gets_the_same_run_and_is_asked_once(project: Path) -> None:
    async with bot_harness(project) as h:
        h.slack.sessions_refused = "not_allowed"
        script_create_story(h.llm)
        top = await h.mention("create-story")
        await h.wait_status(top, "Waiting for your reply")
        mark = h.mark()
        await h.reply(top, STORY_KEY)
        await h.posted_text("completed.", since=mark)
        await h.wait_status(top, "Completed · 6/6 steps")
        await h.settle()

        assert len(session_calls(h, top)) == 1  # refused once: not asked again this process
        assert not h.slack.sessions
        assert ("C1", top) not in h.slack.statuses  # the status line still worked and was cleared
        assert h.slack.calls_to("assistant.threads.setStatus")


async def test_a_failure_that_is_not_a_refusal_drops_only_that_change(project: Path) -> None:
    async with bot_harness(project) as h:
        h.slack.fail_next("agents.sessions.setStatus", "thread_not_found")
        script_create_story(h.llm)
        top = await h.mention("create-story")
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        assert [what for what, _ in session_calls(h, top)] == ["processing", "rename", "active"]
        assert h.slack.sessions[("C1", top)]["status"] == "active"
