"""A run of a small branching workflow (s1 -> decide -> green | brown -> end) whose state file tests change through the tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crewagent.core.document.state import STATE_FILE, init_state_text, read_state, render_text
from crewagent.core.package.models import Graph
from crewagent.core.tools.base import Confirmation, EffectivePolicy, Mounts, ToolContext, ToolOutcome
from crewagent.core.tools.registry import ToolHost

# s1 -> decide -> (green | brown) -> end
GRAPH = Graph.model_validate(
    {
        "schemaVersion": "1.1",
        "entryNodeId": "s1",
        "nodes": [
            {"id": "s1", "type": "step", "file": "steps/s1.md"},
            {"id": "decide", "type": "decision", "file": "steps/decide.md"},
            {"id": "green", "type": "step", "file": "steps/green.md"},
            {"id": "brown", "type": "step", "file": "steps/brown.md"},
            {"id": "end", "type": "end", "file": "steps/end.md"},
        ],
        "edges": [
            {"from": "s1", "to": "decide", "label": "next"},
            {"from": "decide", "to": "green", "label": "greenfield", "conditionText": "variables.kind == 'green'"},
            {"from": "decide", "to": "brown", "label": "brownfield", "isDefault": True},
            {"from": "green", "to": "end", "label": "next"},
            {"from": "brown", "to": "end", "label": "next"},
        ],
    }
)
TEMPLATE = (
    "---\n"
    'schemaVersion: "1.1"\n'
    'workflowType: "demo"\n'
    'runId: ""\n'
    'updatedAt: ""\n'
    'currentNodeId: ""\n'
    "stepsCompleted: []\n"
    "variables: {}\n"
    "decisionLog: []\n"
    "artifacts: []\n"
    "---\n"
    "# Demo workflow\n\nBody text kept as is.\n"
)
NOW = "2025-06-01T10:00:00Z"


class Run:
    """A run's mounts and tool context, plus helpers to call tools and inspect the state file."""

    def __init__(self, root: Path) -> None:
        self.state_dir = root / "state"
        self.project = root / "project"
        for d in (self.state_dir / "logs", self.project / "artifacts", root / "pkg"):
            d.mkdir(parents=True)
        self.state_file = self.state_dir / STATE_FILE
        self.state_file.write_text(init_state_text(TEMPLATE, GRAPH, run_id="r1", agent_id="a", workflow_id="demo", now=NOW))
        self.events: list[dict[str, Any]] = []
        self.ctx = ToolContext(
            mounts=Mounts(project=self.project, pkg=root / "pkg", state=self.state_dir),
            policy=EffectivePolicy(),
            mode="run",
            agent_id="a",
            run_id="r1",
            graph=GRAPH,
            confirmation=Confirmation(),
            audit=self.events.append,
        )
        self.host = ToolHost()

    async def call(self, tool: str, args: dict[str, Any]) -> ToolOutcome:
        return await self.host.execute(tool, json.dumps(args), self.ctx, call_id=f"call-{len(self.events)}")

    async def patch(self, update: dict[str, Any], **extra: Any) -> ToolOutcome:
        patch = {"operation": "updateFrontmatter", "update": update, **extra}
        return await self.call("fs_apply_patch", {"path": "@state/workflow.md", "patch": patch})

    def state(self) -> dict[str, Any]:
        return read_state(self.state_dir)

    def set_state(self, **fields: Any) -> None:
        """Arrange a state directly (test setup, not under test)."""
        fm = {**self.state(), **fields}
        self.state_file.write_text(render_text(fm, "# Demo workflow\n"))


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """A fresh run of the demo workflow, its state file at the entry step."""
    return Run(tmp_path)


def error(outcome: ToolOutcome) -> dict[str, Any]:
    """The error of a tool result that must have failed."""
    assert outcome.result["ok"] is False, outcome.result
    return outcome.result["error"]
