"""The pieces behind Slack's agent surfaces, one by one: plan cards, activity lines, prompts, edits, budgets."""

from __future__ import annotations

from pathlib import Path

from crewagent.bot.native.agent_view import suggested_prompts, thread_title
from crewagent.bot.bolt_app import is_own_edit
from crewagent.bot.render.plan import PlanBook, describe_tool, plan_status
from crewagent.bot.slack_send import CallBudget
from crewagent.core.base.events import RunPhase
from crewagent.core.package.loader import load_package
from crewagent.core.store.runs_model import RunError, RunRecord, RunSnapshot
from tests.support.paths import EXAMPLES
from tests.support.fakes.slack_events import event_envelope

KEY = "T1:C1:1700000000.000100"


def _snapshot(**fields: object) -> RunSnapshot:
    base: dict[str, object] = dict(
        run_id="r1", workflow_id="hello-branch", workflow_name="Hello Branch", phase=RunPhase.RUNNING,
        agent_id="analyst", agent_name="Mary", steps_done=2, steps_total=5,
        current_node_id="step-03b-brownfield", current_node_title="Brownfield",
        steps_completed=["step-01-intake", "decide-02-project-type"],
    )
    base.update(fields)
    return RunSnapshot(**base)  # type: ignore[arg-type]


def test_the_plan_marks_done_current_failed_and_branches_not_taken(tmp_path: Path) -> None:
    package = load_package(EXAMPLES / "hello-branch", cache_dir=tmp_path)
    graph = package.default_workflow.graph
    book = PlanBook()
    book.note("r1", "step-03b-brownfield", "Reading docs/a.md")
    book.note("r1", "step-03b-brownfield", "Writing artifacts/plan-brownfield.md")

    def name(agent_id: str | None) -> str:
        return agent_id or "?"

    running = plan_status(_snapshot(), graph, name, book.details("r1"), key=KEY)
    plan = running.blocks[0]
    tasks = {t["task_id"]: t for t in plan["tasks"]}
    assert plan["title"] == "Hello Branch · Running · 2/5 steps"
    assert [tasks[n]["status"] for n in ("step-01-intake", "decide-02-project-type")] == ["complete", "complete"]
    assert tasks["step-03b-brownfield"]["status"] == "in_progress"
    assert "not taken" in tasks["step-03a-greenfield"]["title"] and "not taken" not in tasks["end-99"]["title"]
    details = tasks["step-03b-brownfield"]["details"]["elements"][0]["elements"][0]["text"]
    assert details == "Reading docs/a.md\nWriting artifacts/plan-brownfield.md"
    assert [e["text"]["text"] for e in running.blocks[1]["elements"]] == ["Pause", "Stop"]

    error = RunError(code="LLM_HTTP_ERROR", message="The model endpoint kept failing (HTTP 500).")
    failed = plan_status(_snapshot(phase=RunPhase.FAILED, error=error), graph, name, {}, key=KEY)
    card = {t["task_id"]: t for t in failed.blocks[0]["tasks"]}["step-03b-brownfield"]
    assert card["status"] == "error" and "HTTP 500" in str(card["output"])
    assert "Failed" in failed.text


def test_tool_lines_name_files_in_project_terms() -> None:
    assert describe_tool("fs_write @project/artifacts/stories/1-2.md") == "Writing artifacts/stories/1-2.md"
    assert describe_tool("fs_apply_patch @state/workflow.md") == "Editing the run state"
    assert describe_tool("fs_list @project") == "Looking through the project"
    assert describe_tool("fs_read @project/x.md — E_NOT_FOUND") == "Reading x.md (failed)"
    assert describe_tool("ui_ask_user project_type") is None


def test_prompts_put_the_most_used_workflows_first(tmp_path: Path) -> None:
    package = load_package(EXAMPLES / "multi-workflows", cache_dir=tmp_path)
    fresh = suggested_prompts([package], [])
    assert len(fresh) == 4 and all(len(p["title"]) <= 75 and p["message"] for p in fresh)
    assert [p["title"].split(" ")[1] for p in fresh[:2]] == ["Talk", "Talk"]

    def ran(workflow_id: str) -> RunRecord:
        return RunRecord(
            run_id=workflow_id, project_id="p", project_root="/p", package_id=package.id, package_root="/k",
            workflow_id=workflow_id, active_agent_id="a",
        )

    busiest = [w.id for w in package.workflows][-1]
    used = suggested_prompts([package], [ran(busiest), ran(busiest)])
    trigger = next(
        item.trigger for a in package.agents for item in a.menu
        if item.workflow and (package.workflow(item.workflow) or package.workflow_by_path(item.workflow)).id == busiest
    )
    assert used[2]["message"] == trigger
    assert thread_title("Bob", "Create Story") == "Create Story · Bob" and thread_title(None) is None


def test_only_the_bots_own_edits_are_dropped_early() -> None:
    own = {"type": "message", "subtype": "message_changed", "channel": "C1", "message": {"app_id": "A1", "text": "x"}}
    human = {**own, "message": {"user": "U1", "text": "x"}}
    other_app = {**own, "message": {"app_id": "A9", "text": "x"}}
    assert is_own_edit(event_envelope(own))
    assert not is_own_edit(event_envelope(human)) and not is_own_edit(event_envelope(other_app))
    assert not is_own_edit(event_envelope({"type": "message", "text": "hi", "channel": "C1", "user": "U1"}))


def test_a_call_budget_allows_its_burst_then_refills_at_its_rate() -> None:
    budget = CallBudget(per_minute=60_000, burst=3)
    assert [budget.take() for _ in range(4)] == [True, True, True, False]
    slow = CallBudget(per_minute=0.0, burst=1)
    assert slow.take() and not slow.take()


async def test_a_status_line_still_wanted_is_sent_again_before_slack_drops_it() -> None:
    from crewagent.bot.native.fallbacks import Fallbacks
    from crewagent.bot.slack_port import SlackPort
    from crewagent.bot.native.status_line import StatusLines
    from crewagent.bot.base.thread import ThreadKey
    from tests.support.fakes import FakeSlack

    async with FakeSlack() as slack:
        client = slack.client()
        lines = StatusLines(SlackPort(client), Fallbacks(), interval=0, rate=1000, refresh_after=0.05)
        key = ThreadKey("T1", "C1", "1.1")
        lines.working(key, "Writing artifacts/a.md")
        first = await slack.wait_for("assistant.threads.setStatus")
        again = await slack.wait_for("assistant.threads.setStatus", since=len(slack.calls))
        assert first["loading_messages"] == again["loading_messages"] == ["Writing artifacts/a.md"]
        lines.done(key)
        since = len(slack.calls)
        cleared = await slack.wait_for("assistant.threads.setStatus", lambda p: p["status"] == "", since=since)
        assert cleared and ("C1", "1.1") not in slack.statuses
        await lines.close()
