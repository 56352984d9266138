"""The engine on the three example packages, with a scripted competent model on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crewagent.core.document import state as run_state
from crewagent.core.base.events import RunPhase
from crewagent.core.run.engine import Engine
from crewagent.core.store.files import RuntimeStore
from crewagent.core.store.history import History
from crewagent.core.store.run_manager import RunManager
from tests.support.scripts import (
    HELLO_LINEAR_ANSWER,
    STORY_KEY,
    current_node,
    drive,
    engine_harness,
    is_post_completion,
    project_type_answer,
    CREATE_STORY_ARTIFACTS,
    script_create_story,
    script_hello_branch,
    script_hello_linear,
    system_text,
)

def audit_kinds(path: Path) -> list[str]:
    return [json.loads(line)["kind"] for line in path.read_text().splitlines()]


async def test_create_story_runs_to_completed_like_the_reference_trace(project: Path) -> None:
    async with engine_harness(project) as h:
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")

        first, second = await drive(h.engine, record, package, [STORY_KEY], on_event=h.record_event)

        assert first.phase is RunPhase.WAITING_USER and first.widget is None
        assert "1-2-user-authentication" in (first.assistant_text or "")
        assert second.phase is RunPhase.COMPLETED
        assert "ready for design" in (second.assistant_text or "")
        assert len(h.llm.requests) <= 9
        h.llm.assert_consumed()

        fm = run_state.read_state(h.store.state_dir(record))
        assert fm["stepsCompleted"] == [
            "step-01-select-story",
            "step-02-discover-inputs",
            "step-03-extract-context",
            "step-04-generate-story",
            "step-05-update-sprint-status",
            "end-99",
        ]
        assert fm["currentNodeId"] == "end-99"
        assert fm["variables"]["workflowStatus"] == "complete"
        assert fm["variables"]["storyKey"] == STORY_KEY
        assert fm["variables"]["sprintStatusResult"] == "skipped"
        assert fm["artifacts"] == CREATE_STORY_ARTIFACTS
        for path in CREATE_STORY_ARTIFACTS:
            assert (project / path).is_file(), path

        started = [(e.node_id, e.agent_id) for e in h.kinds("node_started")]
        assert started == [
            ("step-01-select-story", "sm"),
            ("step-02-discover-inputs", "sm"),
            ("step-03-extract-context", "sm"),
            ("step-04-generate-story", "sm"),
            ("step-05-update-sprint-status", "sm"),
            ("end-99", "summarizer"),
        ]
        assert [e.path for e in h.kinds("artifact_written")] == CREATE_STORY_ARTIFACTS
        phases = [e.phase for e in h.kinds("phase_changed")]
        assert phases == [RunPhase.RUNNING, RunPhase.WAITING_USER, RunPhase.RUNNING, RunPhase.COMPLETED]

        saved = h.runs.get(record.run_id)
        assert saved.phase is RunPhase.COMPLETED
        snap = h.runs.snapshot(saved, package)
        assert (snap.steps_done, snap.steps_total, snap.current_node_id) == (6, 6, None)

        kinds = audit_kinds(h.store.execution_log(record))
        assert kinds[0] == "run.created"
        for kind in ("llm.request", "llm.response", "tool.exec", "state.updated", "run.phase"):
            assert kind in kinds
        assert kinds.count("llm.request") == len(h.llm.requests)


async def test_closing_message_comes_from_a_post_completion_turn(project: Path) -> None:
    async with engine_harness(project) as h:
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        await drive(h.engine, h.create(package, agent="sm"), package, [STORY_KEY])

        closing = h.llm.requests[-1]
        assert is_post_completion(closing)
        assert "You are Sam (Summarizer)" in system_text(closing)
        assert not any(m.get("role") == "tool" for m in closing["messages"][-1:])
        assert "RUNTIME_NOTE" in closing["messages"][-1]["content"]


@pytest.mark.parametrize("branch", ["greenfield", "brownfield"])
async def test_hello_branch_takes_the_branch_the_user_picks(project: Path, branch: str) -> None:
    other = "brownfield" if branch == "greenfield" else "greenfield"
    async with engine_harness(project) as h:
        script_hello_branch(h.llm)
        package = h.load("hello-branch")
        record = h.create(package)
        assert record.active_agent_id == "analyst"  # the agent whose menu starts the workflow

        first = await h.engine.pump(record, package, intent="start", on_event=h.record_event)
        assert first.phase is RunPhase.WAITING_USER
        assert first.widget is not None and first.widget["widgetId"] == "project_type"
        assert [e.widget["widgetId"] for e in h.kinds("widget_requested")] == ["project_type"]
        calls_at_widget = len(h.llm.requests)
        assert current_node(h.llm.requests[-1]) == "decide-02-project-type"  # no LLM call after the widget

        done = await h.engine.pump(
            record, package, intent="continue", user_input=project_type_answer(branch), on_event=h.record_event
        )
        assert done.phase is RunPhase.COMPLETED
        assert len(h.llm.requests) == calls_at_widget + 5

        fm = run_state.read_state(h.store.state_dir(record))
        target = "step-03a-greenfield" if branch == "greenfield" else "step-03b-brownfield"
        assert fm["stepsCompleted"] == ["step-01-intake", "decide-02-project-type", target, "end-99"]
        assert fm["variables"]["projectType"] == branch
        assert [(d["from"], d["to"], d["label"]) for d in fm["decisionLog"]] == [
            ("decide-02-project-type", target, branch)
        ]
        assert (project / f"artifacts/plan-{branch}.md").is_file()
        assert not (project / f"artifacts/plan-{other}.md").exists()
        agents = [e.agent_id for e in h.kinds("node_started")]
        assert agents == ["analyst", "pm", "architect", "summarizer"]


async def test_multi_workflows_switches_persona_at_step_02(project: Path) -> None:
    async with engine_harness(project) as h:
        script_hello_linear(h.llm)
        package = h.load("multi-workflows")
        record = h.create(package, workflow="hello-linear", agent="analyst")

        results = await drive(h.engine, record, package, [HELLO_LINEAR_ANSWER], on_event=h.record_event)
        assert [r.phase for r in results] == [RunPhase.WAITING_USER, RunPhase.COMPLETED]
        assert len(h.llm.requests) == 5

        by_node = {current_node(body): system_text(body) for body in h.llm.requests if current_node(body)}
        assert "You are Mary (Business Analyst)" in by_node["step-01-ask"]
        assert "Winston" not in by_node["step-01-ask"]
        assert "You are Winston (Architect)" in by_node["step-02-generate"]
        assert "Mary" not in by_node["step-02-generate"]
        assert "You are Mary (Business Analyst)" in by_node["end-99"]  # end-99 has no agentId: back to the session's
        graph_line = "- graph: @pkg/workflows/hello-linear/workflow.graph.json"
        assert all(graph_line in "\n".join(m["content"] for m in b["messages"] if m["role"] == "user")
                   for b in h.llm.requests)
        assert [(e.node_id, e.agent_id) for e in h.kinds("node_started")] == [
            ("step-01-ask", "analyst"), ("step-02-generate", "architect"), ("end-99", "analyst")
        ]
        assert (project / "artifacts/hello-linear/result.md").is_file()


async def test_multi_workflows_hello_branch_reuses_the_same_script(project: Path) -> None:
    async with engine_harness(project) as h:
        script_hello_branch(h.llm, preset_branch="brownfield")
        package = h.load("multi-workflows")
        record = h.create(package, workflow="hello-branch", agent="analyst")
        result = await h.engine.pump(record, package, intent="start")
        assert result.phase is RunPhase.COMPLETED
        assert (project / "artifacts/plan-brownfield.md").is_file()


OLDER_ANSWER = ('USER_INPUT\n- forNodeId: decide-02-project-type\nWIDGET_SUBMIT\n'
                '{"widgetId": "project_type", "type": "selection", "value": ["brownfield"]}')
"""An answer as an older release wrote it into the run's log (the text the model reads)."""


async def test_a_run_an_older_release_left_with_its_answer_as_text_resumes(project: Path) -> None:
    async with engine_harness(project) as h:
        script_hello_branch(h.llm)
        package = h.load("hello-branch")
        record = h.create(package)
        await h.engine.pump(record, package, intent="start")
        history = History.load(h.store.conversation_log(record))  # killed after writing the answer
        history.append({"role": "user", "content": OLDER_ANSWER}, part="user_input",
                       nodeId="decide-02-project-type", scope="decide-02-project-type")
        record.phase = RunPhase.RUNNING
        h.runs.update(record)

        store = RuntimeStore()  # a new process over the same home
        runs = RunManager(store)
        before = len(h.llm.requests)
        done = await Engine(store, runs, h.client).pump(runs.get(record.run_id), package, intent="resume")
        assert done.phase is RunPhase.COMPLETED
        assert (project / "artifacts/plan-brownfield.md").is_file()  # the model read the answer and took its branch
        sent = [m["content"] for m in h.llm.requests[before]["messages"] if m["role"] == "user"]
        assert sent.count(OLDER_ANSWER) == 1
