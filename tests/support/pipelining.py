"""A scripted model that pipelines, wrapped around the competent scripted models (bench/tokens.py, tests).

It behaves like a capable model that trusts only what is in its prompt:
- before working on a node it needs the run state (showing that node), the graph and the step file
  with its frontmatter in its prompt; whichever is missing it reads first (the NODE_BRIEF counts for
  the step file only when it carries the whole file, frontmatter included);
- in the reply that moves the state to the next node it already reads what the next node needs:
  the state, the graph and the next step file (the step file only while the briefs it sees carry
  bodies alone).
Reads it can do together with the inner model's own first look (reads, lists, searches) go into one
reply. The inner model decides everything else, so a run does the same work as without the wrapper.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from tests.support.fakes.llm_server import Reply
from tests.support.scripts import STATE, Body, Call, current_node, messages, node_brief, user_texts

LOOKING_TOOLS = frozenset({"fs_read", "fs_list", "fs_search"})
Responder = Callable[[Body], Reply]


def tool_results(body: Body) -> list[dict[str, Any]]:
    """Every parsed tool result in the prompt, oldest first."""
    out: list[dict[str, Any]] = []
    for msg in messages(body):
        if msg.get("role") != "tool":
            continue
        try:
            parsed = json.loads(msg.get("content") or "{}")
        except ValueError:
            continue
        if isinstance(parsed, dict):
            out.append(parsed)
    return out


def graph_alias(body: Body) -> str:
    directive = next((t for t in user_texts(body) if t.startswith("RUN_DIRECTIVE")), "")
    match = re.search(r"^- graph: (\S+)", directive, re.M)
    return match.group(1) if match else "@pkg/workflow.graph.json"


def brief_has_whole_step(body: Body) -> bool:
    _, _, inlined = (node_brief(body) or "").partition("\n\nSTEP_FILE ")
    return inlined.split("\n", 1)[-1].startswith("---\n")


def step_alias(body: Body) -> str | None:
    match = re.search(r"^- stepFile: (\S+)", node_brief(body) or "", re.M)
    return match.group(1) if match else None


def missing_reads(body: Body, node: str) -> list[Call]:
    """The reads this model makes before working on `node`: whatever is not in its prompt."""
    results = tool_results(body)
    read = {r.get("path"): str(r.get("content") or "") for r in results if r.get("ok")}
    shows_node = re.compile(rf"^currentNodeId:\s*[\"']?{re.escape(node)}[\"']?\s*$", re.M)
    missing: list[Call] = []
    if not shows_node.search(read.get(STATE, "")):
        missing.append(("fs_read", {"path": STATE}))
    graph = graph_alias(body)
    if graph not in read:
        missing.append(("fs_read", {"path": graph}))
    step = step_alias(body)
    if step and step not in read and not brief_has_whole_step(body):
        missing.append(("fs_read", {"path": step}))
    return missing


def next_node_of(reply: Reply) -> str | None:
    """The node the reply's last state update moves to, unless that update completes the workflow."""
    target: str | None = None
    for name, args in reply.tool_calls:
        if name != "fs_apply_patch" or args.get("path") != STATE:
            continue
        update = (args.get("patch") or {}).get("update") or {}
        status = ((update.get("variables") or {}).get("set") or {}).get("workflowStatus")
        if status == "complete":
            return None
        moved = (update.get("currentNodeId") or {}).get("set")
        if moved:
            target = str(moved)
    return target


def step_file_of(body: Body, node: str) -> str:
    """The node's step file, from the graph read in the prompt."""
    graph = graph_alias(body)
    for result in tool_results(body):
        if result.get("path") != graph:
            continue
        try:
            nodes = json.loads(str(result.get("content") or "{}")).get("nodes") or []
        except ValueError:
            continue
        for entry in nodes:
            if entry.get("id") == node and entry.get("file"):
                return f"@pkg/{entry['file']}"
    return f"@pkg/steps/{node}.md"


def pipelining(inner: Responder) -> Responder:
    """`inner`, made to read what it lacks and to pipeline the next node's reads (module doc)."""

    def respond(body: Body) -> Reply:
        node = current_node(body)
        if node is None:  # post-completion or a conversation: nothing to prepare
            return inner(body)
        missing = missing_reads(body, node)
        reply = inner(body)
        if missing:
            if reply.tool_calls and all(name in LOOKING_TOOLS for name, _ in reply.tool_calls):
                own = tuple(call for call in reply.tool_calls if call not in missing)
                return Reply(content=reply.content, tool_calls=(*missing, *own))
            return Reply(tool_calls=tuple(missing))
        following = next_node_of(reply)
        if following is None:
            return reply
        reads: list[Call] = [("fs_read", {"path": STATE}), ("fs_read", {"path": graph_alias(body)})]
        if not brief_has_whole_step(body):
            reads.append(("fs_read", {"path": step_file_of(body, following)}))
        return Reply(content=reply.content, tool_calls=(*reply.tool_calls, *reads))

    return respond
