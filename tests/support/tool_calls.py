"""Tools called as the model calls them, in a project laid out for searching."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crewagent.core.document.state import STATE_FILE, init_state_text
from crewagent.core.package.models import Graph
from crewagent.core.tools.base import EffectivePolicy, Mounts, ToolContext, ToolOutcome
from crewagent.core.tools.registry import ToolHost

GRAPH = Graph.model_validate(
    {
        "schemaVersion": "1.1",
        "entryNodeId": "s1",
        "nodes": [{"id": "s1", "type": "step", "file": "s1.md"}, {"id": "end", "type": "end", "file": "end.md"}],
        "edges": [{"from": "s1", "to": "end", "label": "next"}],
    }
)
TEMPLATE = '---\nschemaVersion: "1.1"\nworkflowType: "t"\ncurrentNodeId: ""\nstepsCompleted: []\n---\n'


@pytest.fixture
def mounts(tmp_path: Path) -> Mounts:
    """A project with needles to search for in plain, nested, hidden, ignored and binary files; empty pkg; a fresh state."""
    project, pkg, state = tmp_path / "project", tmp_path / "pkg", tmp_path / "state"
    for d in (project / "docs" / "deep", project / "artifacts", project / ".git", project / "node_modules" / "lib"):
        d.mkdir(parents=True)
    pkg.mkdir()
    (state / "logs").mkdir(parents=True)
    (state / STATE_FILE).write_text(init_state_text(TEMPLATE, GRAPH, run_id="r", agent_id="a", workflow_id="w", now="2025-01-01T00:00:00Z"))
    (project / "readme.md").write_text("Title\nthe needle is here\nlast line\n")
    (project / "docs" / "guide.md").write_text("intro\nsetup\nNeedle in caps\nmore\nneedle again\nend\n")
    (project / "docs" / "deep" / "notes.txt").write_text("a needle deep down\n")
    (project / ".git" / "config").write_text("needle in git\n")
    (project / ".hidden.md").write_text("needle hidden\n")
    (project / "node_modules" / "lib" / "x.js").write_text("needle in deps\n")
    (project / "docs" / "blob.bin").write_bytes(b"needle\x00\x01\x02")
    return Mounts(project=project, pkg=pkg, state=state)


def make_ctx(mounts: Mounts, *, mode: str = "run", policy: EffectivePolicy | None = None, events: list | None = None) -> ToolContext:
    """A tool context for a run (mode "run", with the graph) or a chat; audit events go to `events` if given."""
    return ToolContext(
        mounts=mounts,
        policy=policy or EffectivePolicy(),
        mode=mode,  # type: ignore[arg-type]
        agent_id="agent-1",
        run_id="r" if mode == "run" else None,
        graph=GRAPH if mode == "run" else None,
        audit=events.append if events is not None else None,
    )


async def call(ctx: ToolContext, tool: str, args: dict[str, Any] | str) -> ToolOutcome:
    """Call `tool` the way the model does: arguments as a JSON string (or raw text, to test bad JSON)."""
    raw = args if isinstance(args, str) else json.dumps(args)
    return await ToolHost().execute(tool, raw, ctx, call_id="call-1")


def err(outcome: ToolOutcome) -> dict[str, Any]:
    """The error of a tool result that must have failed."""
    assert outcome.result["ok"] is False, outcome.result
    return outcome.result["error"]


def big_tree(root: Path, files: int) -> None:
    """More files than a search scans in-process, so fs_search hands the tree to ripgrep (if installed)."""
    for i in range(files):
        folder = root / "big" / f"d{i % 7}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"f{i:03d}.md").write_text(f"line one\nneedle {i}\nNeedle again\n" if i % 3 else "nothing here\n")
