"""A generated N-node linear workflow and the scripted model that runs it (tests and bench/tokens.py).

The first node reads the graph file and asks the user for a codename; every later node writes one
artifact and moves the state on; the end node writes a summary that must quote the codename, so a
run only completes correctly if the first node's answer reaches the last node.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.fakes.llm_server import Reply
from tests.support.scripts import (
    Body,
    calls,
    complete_node,
    current_node,
    is_post_completion,
    previous_calls,
    state_summary,
    user_inputs,
    write,
    _post_completion_reply,
)

CODENAME_QUESTION = "Before I start: what codename should the documents use?"
CODENAME_ANSWER = "Codename BLUE-HERON-42, please"
NOT_FOUND = "(scripted model: I do not know the codename)"

_STEP = """---
schemaVersion: "1.1"
nodeId: "{node}"
type: "{kind}"
title: "{title}"
agentId: "writer"
inputs: []
outputs:
  - "{artifact}"
transitions: {transitions}
---
# {title}

## Goal

Write `@project/{artifact}`: section {number} of the project handbook, in the codename the user
chose at the first step.

## Instructions

1. Use the codename from the state summary (`userAnswers`); ask the user only if it is missing.
2. Write `@project/{artifact}` with `fs_write`: a heading, three short paragraphs on the topic of
   this section, and a closing list of open questions. Keep it under one page.
3. In the same turn, update `@state/workflow.md` with `fs_apply_patch` (`updateFrontmatter`):
   append `{node}` to `stepsCompleted`, set `currentNodeId` to the next node, append the artifact.

## Notes

- Keep the wording plain; the handbook is read by new team members.
- Do not repeat earlier sections; refer to them by file name.
"""


def node_id(number: int, total: int) -> str:
    return "end-99" if number == total else f"step-{number:02d}-section"


def artifact_of(number: int, total: int) -> str:
    return "artifacts/linear/summary.md" if number == total else f"artifacts/linear/section-{number:02d}.md"


def make_linear_package(root: Path, nodes: int = 40) -> Path:
    """Write a valid package with `nodes` nodes (the last one the end node) under `root`."""
    (root / "steps").mkdir(parents=True, exist_ok=True)
    graph_nodes, edges = [], []
    for n in range(1, nodes + 1):
        nid = node_id(n, nodes)
        kind = "end" if n == nodes else "step"
        title = "Finish" if n == nodes else f"Section {n}"
        graph_nodes.append(
            {"id": nid, "type": kind, "file": f"steps/{nid}.md", "title": title, "agentId": "writer"}
        )
        transitions = "[]"
        if n < nodes:
            nxt = node_id(n + 1, nodes)
            edges.append({"from": nid, "to": nxt, "label": "next"})
            transitions = f'\n  - to: "{nxt}"\n    label: "next"'
        step = _STEP.format(
            node=nid, kind=kind, title=title, artifact=artifact_of(n, nodes), transitions=transitions, number=n
        )
        (root / "steps" / f"{nid}.md").write_text(step, encoding="utf-8")
    graph = {"schemaVersion": "1.1", "entryNodeId": node_id(1, nodes), "nodes": graph_nodes, "edges": edges}
    (root / "workflow.graph.json").write_text(json.dumps(graph, indent=2), encoding="utf-8")
    (root / "workflow.md").write_text(
        "---\n"
        'schemaVersion: "1.1"\n'
        'workflowType: "linear-handbook"\n'
        f'currentNodeId: "{node_id(1, nodes)}"\n'
        "stepsCompleted: []\nvariables: {}\ndecisionLog: []\nartifacts: []\n"
        "---\n# Linear handbook\n\nWrite the project handbook one section per node.\n",
        encoding="utf-8",
    )
    agents = {
        "schemaVersion": "1.1",
        "agents": [
            {
                "id": "writer",
                "metadata": {"name": "Wren", "title": "Technical Writer", "icon": "📝", "module": "bmm"},
                "persona": {
                    "role": "Technical writer",
                    "identity": "Writes plain, short handbook sections.",
                    "communication_style": "Brief and friendly.",
                    "principles": ["Plain words.", "One page per section."],
                },
                "menu": [{"trigger": "handbook", "description": "Write the handbook", "workflow": "workflow.md"}],
                "tools": {"fs": {"enabled": True}, "mcp": {"enabled": False}},
            }
        ],
    }
    (root / "agents.json").write_text(json.dumps(agents, indent=2), encoding="utf-8")
    bmad = {
        "schemaVersion": "1.1",
        "name": "linear-handbook",
        "version": "0.1.0",
        "description": f"Generated {nodes}-node linear workflow.",
        "createdAt": "2026-01-01T00:00:00Z",
        "entry": {"workflow": "workflow.md", "graph": "workflow.graph.json", "agents": "agents.json"},
    }
    (root / "bmad.json").write_text(json.dumps(bmad, indent=2), encoding="utf-8")
    return root


def codename(body: Body) -> str | None:
    """The codename from the conversation if it is there, else from the state summary's userAnswers."""
    texts = user_inputs(body) + [a.get("answer", "") for a in state_summary(body).get("userAnswers", [])]
    for text in texts:
        if "BLUE-HERON" in text:
            return "BLUE-HERON-42"
    return None


def linear_responder(nodes: int) -> Callable[[Body], Reply]:
    """The competent model for make_linear_package(nodes): 2 + nodes + 1 calls, one stop (the codename)."""
    numbers = {node_id(n, nodes): n for n in range(1, nodes + 1)}

    def respond(body: Body) -> Reply:
        if is_post_completion(body):
            return _post_completion_reply(body, "The handbook is written: see artifacts/linear/.")
        node = current_node(body)
        number = numbers.get(node or "")
        if number is None:
            return Reply(content=f"(scripted model: no plan for node {node!r})")
        name = codename(body)
        if number == 1 and name is None:
            if "fs_read" in [n for n, _ in previous_calls(body)]:
                return Reply(content=CODENAME_QUESTION)
            return calls(("fs_read", {"path": "@pkg/workflow.graph.json"}))
        if name is None:
            return Reply(content=NOT_FOUND)
        artifact = artifact_of(number, nodes)
        text = _section_text(name, number)
        if number == nodes:
            done = complete_node(node, to=None, variables={"workflowStatus": "complete"}, artifacts=[artifact])
            return calls(write(f"@project/{artifact}", f"# {name} handbook: summary\n\n{text}"), done)
        step = complete_node(node, to=node_id(number + 1, nodes), artifacts=[artifact])
        return calls(write(f"@project/{artifact}", f"# {name} handbook, section {number}\n\n{text}"), step)

    return respond


def _section_text(name: str, number: int) -> str:
    paragraph = (
        f"This section of the {name} handbook explains part {number} of how the team works: who does what, "
        "which documents matter, and where to ask. It stays short on purpose. "
    )
    return "\n\n".join([paragraph * 3] * 3) + "\n\n## Open questions\n- none yet\n"


def first_call_of_each_node(requests: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The first request sent while each node was active, by node id."""
    firsts: dict[str, dict[str, Any]] = {}
    for body in requests:
        node = current_node(body)
        if node is not None and node not in firsts:
            firsts[node] = body
    return firsts
