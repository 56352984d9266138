"""Sub-workflow nodes: the caller starts a child run, waits for it, and goes on with its outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import state as run_state
from core.events import NodeStarted, PhaseChanged, RunPhase, SubworkflowReturned, SubworkflowStarted
from core.package.models import Package
from core.runs_model import RunRecord
from tests.scripts import (
    DIRECTION_WIDGET,
    FEATURE_ANSWER,
    PARTY_ARTIFACTS,
    PLAN_FEATURE_ARTIFACTS,
    EngineHarness,
    current_node,
    direction_answer,
    drive,
    engine_harness,
    hello_subflow_responder,
)

PARENT_NODES = ["step-01-brief", "sub-02-party-mode", "step-03-plan", "end-99"]
CHILD_NODES = ["party-01-voices", "party-02-choose", "party-99-wrap"]


def _state(h: EngineHarness, record: RunRecord) -> dict:
    return run_state.read_state(h.store.state_dir(h.runs.get(record.run_id)))


def _start(h: EngineHarness) -> tuple[Package, RunRecord]:
    h.llm.responder = hello_subflow_responder()
    package = h.load("hello-subflow")
    return package, h.create(package)  # no --workflow: the bmad.json entry (plan-feature)


async def test_subworkflow_runs_nested_and_returns_its_outputs(project: Path) -> None:
    async with engine_harness(project) as h:
        package, record = _start(h)
        assert record.workflow_id == "plan-feature"
        results = await drive(h.engine, record, package, [FEATURE_ANSWER, direction_answer()],
                              on_event=h.record_event)

        # the caller stopped twice: its own question, then the child's widget (answered through the caller)
        assert [r.phase for r in results] == [RunPhase.WAITING_USER, RunPhase.WAITING_USER, RunPhase.COMPLETED]
        assert results[1].widget == DIRECTION_WIDGET and results[1].run_id == record.run_id
        assert sum(r.llm_calls for r in results) == 7 == len(h.llm.requests)

        parent = h.runs.get(record.run_id)
        [child_id] = parent.child_run_ids
        assert parent.child_run_id is None  # nothing pending any more
        child = h.runs.get(child_id)
        assert (child.parent_run_id, child.parent_node_id, child.workflow_id) == (
            record.run_id, "sub-02-party-mode", "party-mode")
        assert child.project_id == parent.project_id and child.phase is RunPhase.COMPLETED
        assert h.store.state_dir(child) != h.store.state_dir(parent)

        fm = _state(h, record)
        assert fm["stepsCompleted"] == PARENT_NODES
        assert fm["variables"]["direction"] == "simple-rules"  # graph node outputs: copied back
        assert fm["variables"]["discussionPath"] == "artifacts/party-mode/discussion.md"
        assert "topic" not in fm["variables"]  # a child variable not in `outputs` stays in the child
        assert fm["artifacts"] == PLAN_FEATURE_ARTIFACTS
        child_fm = _state(h, child)
        assert child_fm["variables"]["featureName"] == "recurring-tasks"  # passVariables
        assert child_fm["stepsCompleted"] == CHILD_NODES
        for rel in PLAN_FEATURE_ARTIFACTS:
            assert (project / rel).is_file()

        # the child's model saw why it was called; the caller's model never ran the subworkflow node
        child_requests = [b for b in h.llm.requests if current_node(b) in CHILD_NODES]
        first = "\n".join(str(m.get("content")) for m in child_requests[0]["messages"])
        assert "SUBWORKFLOW_CALL" in first and "Round-table (party mode)" in first and "recurring-tasks" in first
        assert not [b for b in h.llm.requests if current_node(b) == "sub-02-party-mode"]
        after = next(b for b in h.llm.requests if current_node(b) == "step-03-plan")
        assert any("sub-workflow \"Party Mode\"" in str(m.get("content")) for m in after["messages"])

        # events: the child's carry the caller as parent; start and return are announced
        nodes = [(e.node_id, e.parent_run_id) for e in h.events if isinstance(e, NodeStarted)]
        assert nodes == [("step-01-brief", None), ("sub-02-party-mode", None),
                         ("party-01-voices", record.run_id), ("party-02-choose", record.run_id),
                         ("party-99-wrap", record.run_id), ("step-03-plan", None), ("end-99", None)]
        started = [e for e in h.events if isinstance(e, SubworkflowStarted)]
        assert [(e.child_run_id, e.resumed) for e in started] == [(child_id, False), (child_id, True)]
        [back] = [e for e in h.events if isinstance(e, SubworkflowReturned)]
        assert back.variables == {"direction": "simple-rules", "discussionPath": "artifacts/party-mode/discussion.md"}
        assert back.artifacts == PARTY_ARTIFACTS
        child_phases = [e.phase for e in h.events if isinstance(e, PhaseChanged) and e.run_id == child_id]
        assert child_phases[-1] is RunPhase.COMPLETED
