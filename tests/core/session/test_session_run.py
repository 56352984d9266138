"""RunMode through the SessionService: the Agent-First golden path, global commands, widgets, retry."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from crewagent.core.document import state as run_state
from crewagent.core.base.events import RunPhase
from crewagent.core.base.answers import STATE_CHANGE_CONFIRM_ID
from tests.support.scripts import (
    HELLO_LINEAR_ANSWER,
    STORY_KEY,
    patch_state,
    script_create_story,
    script_hello_branch,
    script_hello_linear,
)
from tests.support.session_harness import kinds, of_kind, request_text, session_harness

SIX_ARTIFACTS = {
    "artifacts/create-story/target.md",
    "artifacts/create-story/inputs.md",
    "artifacts/create-story/context.md",
    f"artifacts/stories/{STORY_KEY}.md",
    "artifacts/create-story/sprint-status-update.md",
    "artifacts/create-story/summary.md",
}
CONFIRM_WIDGET = {
    "widgetId": STATE_CHANGE_CONFIRM_ID,
    "type": "confirmation",
    "message": "I want to set variables.storyApproved = true in @state/workflow.md (the run stays complete). Proceed?",
}
APPROVE = patch_state({"variables": {"set": {"storyApproved": True}}})


def last_tool_results(body: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for message in reversed(body["messages"]):
        if message["role"] != "tool":
            break
        out.insert(0, message["content"])
    return out


@pytest.mark.parametrize("command", ["create-story", "1", "please create the next story"])
async def test_agent_first_create_story_golden_path(project: Path, command: str) -> None:
    async with session_harness(project, "create-story-micro") as s:
        script_create_story(s.h.llm)
        assert kinds(await s.open()) == ["show_agents"]
        menu = await s.text("sm")
        assert kinds(menu) == ["show_menu"] and s.session.agent_id == "sm"

        out = await s.text(command)
        assert kinds(out)[0] == "run_started"
        question = of_kind(out, "reply")[-1]
        assert "1-2-user-authentication" in question.text and question.agent.name == "Bob"
        run_id = s.session.run_id
        assert s.session.mode == "run" and s.h.runs.get(run_id).phase is RunPhase.WAITING_USER

        out = await s.text(STORY_KEY)
        progress = of_kind(out, "run_progress")
        phases = [p.event.phase for p in progress if p.event.kind == "phase_changed"]
        assert phases[-1] is RunPhase.COMPLETED
        final = progress[-1].snapshot
        assert final.phase is RunPhase.COMPLETED and set(final.artifacts) == SIX_ARTIFACTS
        assert final.steps_done == final.steps_total == 6
        for rel in SIX_ARTIFACTS:
            assert (project / rel).is_file(), rel
        assert {p.event.path for p in progress if p.event.kind == "artifact_written"} == SIX_ARTIFACTS
        closing = of_kind(out, "reply")[-1]
        assert "ready for design" in closing.text and closing.agent.name == "Sam"  # end-99 runs as summarizer
        assert len(s.requests) == 9  # the reference trace
        assert s.session.mode == "run" and s.session.run_id == run_id  # post-completion chat stays in the run

        # Post-completion: a state change must be confirmed by the user through the widget.
        s.h.llm.responder = None
        state_dir = s.h.store.state_dir(s.h.runs.get(run_id))
        before = (state_dir / "workflow.md").read_bytes()
        s.h.llm.add_reply(tool_calls=[APPROVE])
        s.h.llm.add_reply(tool_calls=[("ui_ask_user", CONFIRM_WIDGET)])
        out = await s.text("Mark the story as approved in the run state.")
        widget = of_kind(out, "widget")
        assert len(widget) == 1 and widget[0].widget["widgetId"] == STATE_CHANGE_CONFIRM_ID
        assert "STATE_CHANGE_REQUIRES_CONFIRMATION" in last_tool_results(s.requests[-1])[0]
        assert (state_dir / "workflow.md").read_bytes() == before
        assert s.session.pending_widget is not None and s.session.pending_widget.run_id == run_id

        s.h.llm.add_reply(tool_calls=[APPROVE])
        s.h.llm.add_reply("Approved: storyApproved is now true.")
        out = await s.submit(STATE_CHANGE_CONFIRM_ID, {"confirmed": True})
        assert of_kind(out, "reply")[-1].text == "Approved: storyApproved is now true."
        submitted = [m for m in s.requests[-2]["messages"] if m["role"] == "user"][-1]["content"]
        assert submitted.startswith("USER_INPUT\nWIDGET_SUBMIT\n") and '"confirmed": true' in submitted
        assert '"ok": true' in last_tool_results(s.requests[-1])[0]
        fm = run_state.read_state(state_dir)
        assert fm["variables"]["storyApproved"] is True and fm["variables"]["workflowStatus"] == "complete"
        assert s.session.pending_widget is None and s.h.runs.get(run_id).phase is RunPhase.COMPLETED

        # The same confirmation cannot be replayed, and does not authorise a later change.
        calls = len(s.requests)
        out = await s.submit(STATE_CHANGE_CONFIRM_ID, {"confirmed": True})
        assert kinds(out) == ["notice"] and "already answered" in out[0].text and len(s.requests) == calls
        s.h.llm.add_reply(tool_calls=[patch_state({"variables": {"set": {"storyApproved": False}}})])
        s.h.llm.add_reply("That change needs your confirmation first.")
        await s.text("Actually, un-approve it.")
        assert "STATE_CHANGE_REQUIRES_CONFIRMATION" in last_tool_results(s.requests[-1])[0]
        assert run_state.read_state(state_dir)["variables"]["storyApproved"] is True
        s.h.llm.assert_consumed()


async def test_run_status_and_controls_when_idle(project: Path) -> None:
    async with session_harness(project, "multi-workflows") as s:
        script_hello_linear(s.h.llm)
        await s.pick("analyst")
        await s.text("hello-linear")
        out = await s.text("*STATUS")
        assert kinds(out) == ["run_status"] and out[0].snapshot.workflow_id == "hello-linear"
        for command in ("*pause", "/stop"):
            out = await s.text(command)
            assert kinds(out) == ["notice"] and "Nothing is running" in out[0].text
        out = await s.control("retry")
        assert kinds(out) == ["notice"] and "nothing to retry" in out[0].text
        assert len(s.requests) == 1  # none of these reached the model


async def test_pause_and_stop_while_pumping_then_resume(project: Path) -> None:
    async with session_harness(project, "multi-workflows") as s:
        script_hello_linear(s.h.llm)
        await s.pick("analyst")
        await s.text("hello-linear")
        run_id = s.session.run_id

        s.h.llm.add_delay(0.4)
        answering = asyncio.create_task(s.text(HELLO_LINEAR_ANSWER))
        await s.h.llm.wait_for_requests(2)
        notice = await s.control("pause")
        assert kinds(notice) == ["notice"] and "Pausing" in notice[0].text
        await asyncio.wait_for(answering, 5)
        record = s.h.runs.get(run_id)
        assert record.phase is RunPhase.WAITING_USER and record.paused
        assert len(s.requests) == 2  # paused after the turn in flight

        s.h.llm.add_delay(3)
        resuming = asyncio.create_task(s.text("*resume"))
        await s.h.llm.wait_for_requests(3)
        out = await s.text("*stop")  # typed while the run works
        assert "Stopping" in out[0].text
        await asyncio.wait_for(resuming, 5)
        assert s.h.runs.get(run_id).phase is RunPhase.WAITING_USER

        out = await s.control("resume")
        assert s.h.runs.get(run_id).phase is RunPhase.COMPLETED
        assert of_kind(out, "run_progress")[-1].snapshot.phase is RunPhase.COMPLETED
        out = await s.text("*resume")
        assert "complete" in out[0].text and s.session.mode == "run"


async def test_menu_during_a_run_then_dismiss_and_resume_later(project: Path) -> None:
    async with session_harness(project, "multi-workflows") as s:
        script_hello_linear(s.h.llm)
        await s.pick("analyst")
        await s.text("hello-linear")
        run_id = s.session.run_id
        out = await s.text("*menu")
        assert kinds(out) == ["show_menu"] and s.session.mode == "run" and s.session.run_id == run_id

        out = await s.text("*dismiss")
        assert kinds(out) == ["dismissed"] and "resume" in out[0].text
        assert (s.session.mode, s.session.run_id, s.session.last_run_id) == ("idle", None, run_id)
        assert s.h.runs.get(run_id).phase is RunPhase.WAITING_USER  # still saved, resumable

        out = await s.text("*resume")
        assert of_kind(out, "run_started")[0].snapshot.run_id == run_id
        assert s.session.mode == "run" and s.session.agent_id == "analyst"
        out = await s.text(HELLO_LINEAR_ANSWER)
        assert s.h.runs.get(run_id).phase is RunPhase.COMPLETED


async def test_menu_pick_during_a_run_starts_the_other_workflow(project: Path) -> None:
    async with session_harness(project, "multi-workflows") as s:
        script_hello_linear(s.h.llm)
        await s.pick("analyst")
        await s.text("hello-linear")
        first = s.session.run_id
        await s.control("menu")
        assert s.session.menu_open
        script_hello_branch(s.h.llm)
        out = await s.text("2")
        started = of_kind(out, "run_started")
        assert started and started[0].snapshot.workflow_id == "hello-branch"
        assert s.session.run_id != first and s.h.runs.get(first).phase is RunPhase.WAITING_USER

        await s.text("*menu")
        calls = len(s.requests)
        await s.text("it is a brand new product")  # not a menu pick: goes to the run
        assert len(s.requests) > calls and not s.session.menu_open
        assert "it is a brand new product" in request_text(s.requests[calls])


async def test_widget_answers_and_stale_submissions(project: Path) -> None:
    async with session_harness(project, "hello-branch") as s:
        script_hello_branch(s.h.llm)
        await s.pick("analyst")
        out = await s.text("hello-branch")
        widget = of_kind(out, "widget")[0]
        assert widget.widget["widgetId"] == "project_type" and widget.run_id == s.session.run_id
        assert s.session.pending_widget.widget_id == "project_type"

        calls = len(s.requests)
        out = await s.submit("some_other_widget", ["greenfield"])
        assert kinds(out) == ["notice"] and out[0].text == "This question was already answered."
        assert len(s.requests) == calls and s.session.pending_widget is not None

        out = await s.submit("project_type", ["brownfield"])
        assert s.h.runs.get(s.session.run_id).phase is RunPhase.COMPLETED
        assert (project / "artifacts" / "plan-brownfield.md").is_file()
        calls = len(s.requests)
        out = await s.submit("project_type", ["greenfield"])  # a second click on the old buttons
        assert out[0].text == "This question was already answered." and len(s.requests) == calls
        assert not (project / "artifacts" / "plan-greenfield.md").exists()


async def test_an_answer_the_question_does_not_offer_is_refused_and_the_question_stays_open(project: Path) -> None:
    async with session_harness(project, "hello-branch") as s:
        script_hello_branch(s.h.llm)
        await s.pick("analyst")
        await s.text("hello-branch")
        calls = len(s.requests)
        out = await s.submit("project_type", ["purple"])
        assert [(o.kind, o.code) for o in out] == [("error", "ANSWER_INVALID")]
        assert out[0].message == ("That answer cannot be used: 'purple' is not one of its options. "
                                  "The question is still open.")
        assert len(s.requests) == calls and s.session.pending_widget is not None
        out = await s.submit("project_type", ["brownfield"])
        assert s.h.runs.get(s.session.run_id).phase is RunPhase.COMPLETED


async def test_plain_text_answers_a_pending_widget(project: Path) -> None:
    async with session_harness(project, "hello-branch") as s:
        script_hello_branch(s.h.llm)
        await s.pick("analyst")
        await s.text("hello-branch")
        assert s.session.pending_widget is not None
        s.h.llm.responder = None
        s.h.llm.add_reply("Understood: brownfield. Shall I go on?")
        out = await s.text("brownfield, we extend the old system")
        assert of_kind(out, "reply")[-1].text == "Understood: brownfield. Shall I go on?"
        typed = [m["content"] for m in s.requests[-1]["messages"] if m["role"] == "user"][-1]
        assert typed == "USER_INPUT\n- forNodeId: decide-02-project-type\nbrownfield, we extend the old system"
        assert s.session.pending_widget is None  # the typed text answered it; the buttons are stale now
        calls = len(s.requests)
        out = await s.submit("project_type", ["greenfield"])
        assert out[0].text == "This question was already answered." and len(s.requests) == calls
        s.h.llm.assert_consumed()


async def test_failed_run_reports_clearly_and_retry_resumes(project: Path) -> None:
    async with session_harness(project, "multi-workflows") as s:
        await s.pick("analyst")
        for _ in range(4):  # first try + 3 SDK retries
            s.h.llm.add_error(500, "upstream exploded")
        out = await s.text("hello-linear")
        errors = of_kind(out, "error")
        assert errors and errors[-1].code == "LLM_HTTP_ERROR" and "Retry" in errors[-1].message
        run_id = s.session.run_id
        assert s.h.runs.get(run_id).phase is RunPhase.FAILED and s.session.mode == "run"
        script_hello_linear(s.h.llm)
        out = await s.control("retry")
        assert "What is the topic?" in of_kind(out, "reply")[-1].text
        assert s.h.runs.get(run_id).phase is RunPhase.WAITING_USER


async def test_a_vanished_run_falls_back_to_the_agent(project: Path) -> None:
    async with session_harness(project, "multi-workflows") as s:
        await s.pick("analyst")
        s.session.mode, s.session.run_id = "run", "no-such-run"
        out = await s.text("hello?")
        assert kinds(out) == ["error"] and out[0].code == "RUN_NOT_FOUND"
        assert s.session.mode == "agent" and s.session.run_id is None and s.requests == []


async def test_a_failing_surface_renderer_does_not_break_the_run(project: Path) -> None:
    async with session_harness(project, "multi-workflows") as s:
        script_hello_linear(s.h.llm)

        async def broken_emit(output: Any) -> None:
            raise RuntimeError("renderer bug")

        await s.service.pick_agent(s.session, "analyst", broken_emit)
        out = await s.service.handle_text(s.session, "hello-linear", broken_emit)
        assert of_kind(out, "run_started") and "What is the topic?" in of_kind(out, "reply")[-1].text
        assert s.h.runs.get(s.session.run_id).phase is RunPhase.WAITING_USER
