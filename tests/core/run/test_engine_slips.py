"""A model turn that ends asking nothing while the run stands still is nudged once, then handed to the user."""

from __future__ import annotations

from pathlib import Path

import pytest

from crewagent.core.document.state import read_state
from crewagent.core.base.events import RunPhase
from crewagent.core.run.runaway import looks_like_question
from tests.support.fakes.llm_server import Reply
from tests.support.paths import EXAMPLES
from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.cli_driver import cli
from tests.support.scripts import Body, create_story_responder, engine_harness, hello_branch_responder, messages
from tests.support.bot_harness import bot_harness, message_text

SLIP = "Step done. Moving on."
NUDGE_MARK = "has not moved"


def nudges(body: Body) -> int:
    return sum(1 for m in messages(body) if m.get("role") == "user" and NUDGE_MARK in str(m.get("content")))


class SlippingModel:
    """hello-branch's competent model, except that its first `slips` attempts to finish the intake node
    end with "Step done. Moving on." instead of the state patch that moves the run."""

    def __init__(self, slips: int) -> None:
        self.slips = slips
        self.inner = hello_branch_responder(preset_branch="greenfield")

    def __call__(self, body: Body) -> Reply:
        reply = self.inner(body)
        moves = any(name == "fs_apply_patch" for name, _ in reply.tool_calls)
        if self.slips and moves and "step-01-intake" in str(reply.tool_calls):
            self.slips -= 1
            return Reply(content=SLIP)
        return reply


async def test_a_model_that_says_it_is_done_without_moving_is_nudged_and_finishes(project: Path) -> None:
    async with engine_harness(project) as h:
        h.llm.responder = SlippingModel(slips=1)
        package = h.load("hello-branch")
        record = h.create(package, agent="analyst")
        result = await h.engine.pump(record, package, intent="start", on_event=h.record_event)
        assert result.phase is RunPhase.COMPLETED
        assert [nudges(body) for body in h.llm.requests].count(1) >= 1
        nudge = next(m for body in h.llm.requests for m in messages(body) if NUDGE_MARK in str(m.get("content")))
        assert nudge["content"].startswith("RUNTIME_NOTE") and '"decide-02-project-type"' in nudge["content"]
        assert "ui_ask_user" in nudge["content"]
        assert any(getattr(e, "text", None) == SLIP for e in h.kinds("assistant_text"))  # the user saw what it said
        audit = (h.store.state_dir(record) / "logs" / "execution.jsonl").read_text(encoding="utf-8")
        assert audit.count('"engine.nudged"') == 1


async def test_a_model_that_slips_twice_hands_over_to_the_user(project: Path) -> None:
    async with engine_harness(project) as h:
        h.llm.responder = SlippingModel(slips=2)
        package = h.load("hello-branch")
        record = h.create(package, agent="analyst")
        result = await h.engine.pump(record, package, intent="start", on_event=h.record_event)
        assert result.phase is RunPhase.WAITING_USER and not result.paused
        assert result.assistant_text == SLIP
        assert max(nudges(body) for body in h.llm.requests) == 1  # one nudge, then the user decides
        state = read_state(h.store.state_dir(record))
        assert state["currentNodeId"] in ("", "step-01-intake") and not state.get("stepsCompleted")

        # The user's reply starts a new pump, which may nudge once again.
        h.llm.responder = SlippingModel(slips=0)
        finished = await h.engine.pump(h.runs.get(record.run_id), package, intent="continue", user_input="go on")
        assert finished.phase is RunPhase.COMPLETED


def asks_without_a_question_mark(body: Body) -> Reply:
    reply = create_story_responder()(body)
    if reply.content and "Which story" in reply.content:
        return Reply(content="There is no sprint-status.yaml here. Please give me the key of the story to prepare.")
    return reply


async def test_a_genuine_question_is_never_nudged(project: Path) -> None:
    for responder in (create_story_responder(), asks_without_a_question_mark):
        async with engine_harness(project) as h:
            h.llm.responder = responder
            package = h.load("create-story-micro")
            result = await h.engine.pump(h.create(package, agent="sm"), package, intent="start")
            assert result.phase is RunPhase.WAITING_USER
            assert all(nudges(body) == 0 for body in h.llm.requests)
            assert len(h.llm.requests) == 2  # list the folders, then ask: no extra call


def test_what_counts_as_asking() -> None:
    asking = ["Which story should I prepare?", "Please confirm the story key.", "Let me know the format you want.",
              "Tell me which epic to use.", "Waiting for your answer on the scope."]
    not_asking = ["Step done. Moving on.", "I wrote the intake file.", "", None]
    assert all(looks_like_question(text) for text in asking)
    assert not any(looks_like_question(text) for text in not_asking)


async def test_in_slack_the_slip_is_shown_and_the_run_still_completes(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        h.llm.responder = SlippingModel(slips=1)
        top = await h.mention("hello-branch")
        await h.posted_text("completed", timeout=60)
        await h.settle()
        said = [message_text(m) for m in h.thread(top)]
        assert any(SLIP in text for text in said)  # what the model said stays in the thread
        assert "Completed" in message_text(h.status_message(top))
        assert sum(nudges(body) > 0 for body in h.llm.requests) >= 1


async def test_in_the_terminal_the_slip_is_printed_and_the_run_still_completes(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        llm.responder = SlippingModel(slips=1)
        argv = ["run", str(EXAMPLES / "hello-branch"), "--project", str(project)]
        code, out, err = await cli(argv, "", monkeypatch, capsys)
    assert code == 0, err
    assert SLIP in out and "Run complete." in out.split(SLIP)[1]  # no prompt for the user in between
