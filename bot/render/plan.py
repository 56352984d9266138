"""The run as Slack's plan: one task card per workflow node, redrawn in place as the run moves.

Each node shows as pending, in progress, complete, failed, or "not taken" (a branch the run can no
longer reach), with its agent and, as details, the files the run read and wrote there. The plan is
a `plan` block in the run's status message, edited with chat.update through the status board, so
it outlives any one streamed reply, survives restarts and keeps the Pause / Stop / Resume buttons
under it. A thread where Slack refuses the plan block gets the drawn status of before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from slack_sdk.models.blocks import PlanBlock, TaskCardBlock

from crewagent.core.api.events import RunPhase
from crewagent.core.api.packages import Graph
from crewagent.core.api.runs import RunSnapshot

from . import blocks
from .next_step_blocks import cycle_line
from .message import BlockJSON, SlackMessage

TOOL_VERBS = {
    "fs_read": "Reading",
    "fs_write": "Writing",
    "fs_apply_patch": "Editing",
    "fs_list": "Looking through",
    "fs_search": "Searching",
    "workflow_rewind": "Going back to",
}
MOUNT_NAMES = {"@project/": "", "@pkg/": "the package's ", "@state/": "the run's "}
DETAILS_PER_NODE = 4
KEPT_RUNS = 1000
MAX_TASKS = 40  # a plan stays readable; longer workflows show their first nodes and a count
TITLE_LIMIT = 150

PHASE_WORDS = {
    RunPhase.RUNNING: "Running",
    RunPhase.WAITING_USER: "Waiting for your reply",
    RunPhase.COMPLETED: "Completed",
    RunPhase.FAILED: "Failed",
}


def describe_tool(summary: str) -> str | None:
    """`fs_write @project/artifacts/x.md` → `Writing artifacts/x.md`; None for calls that touch no file."""
    tool, _, rest = summary.partition(" ")
    verb = TOOL_VERBS.get(tool)
    if verb is None:
        return None
    target, _, failure = rest.partition(" — ")
    target = target.strip()
    if target in ("@project", "@project/"):
        target = "the project"
    for mount, name in MOUNT_NAMES.items():
        if target.startswith(mount):
            target = name + target[len(mount) :]
            break
    if target in ("the run's workflow.md", "the run's "):
        target = "the run state"
    text = f"{verb} {target}".strip()
    return f"{text} (failed)" if failure else text


class PlanBook:
    """What each node of recent runs did (task details), newest first forgotten last."""

    def __init__(self, kept: int = KEPT_RUNS) -> None:
        self._runs: OrderedDict[str, dict[str, list[str]]] = OrderedDict()
        self.kept = kept

    def note(self, run_id: str, node_id: str | None, line: str, *, replacing: str | None = None) -> None:
        """`replacing`: drop earlier lines that start with it (a running command's line is updated in place)."""
        if not node_id:
            return
        nodes = self._runs.setdefault(run_id, {})
        self._runs.move_to_end(run_id)
        lines = nodes.setdefault(node_id, [])
        if replacing:
            lines[:] = [kept for kept in lines if not kept.startswith(replacing)]
        if line in lines:
            lines.remove(line)
        lines.append(line)
        del lines[:-DETAILS_PER_NODE]
        while len(self._runs) > self.kept:
            self._runs.popitem(last=False)

    def details(self, run_id: str) -> dict[str, list[str]]:
        return {node: list(lines) for node, lines in self._runs.get(run_id, {}).items()}


def reachable(graph: Graph, start: str) -> set[str]:
    seen = {start}
    todo = [start]
    while todo:
        for edge in graph.outgoing(todo.pop()):
            if edge.to not in seen:
                seen.add(edge.to)
                todo.append(edge.to)
    return seen


def _rich_text(lines: list[str]) -> dict[str, Any]:
    return {
        "type": "rich_text",
        "elements": [{"type": "rich_text_section", "elements": [{"type": "text", "text": "\n".join(lines)}]}],
    }


def _nested_line(snapshot: RunSnapshot) -> str:
    """`Plan a Feature › Party Mode: Choose a direction · Sally (UX Designer) · 1/3 steps`."""
    chain = snapshot.chain()
    working = chain[-1]
    step = f": {working.current_node_title}" if working.current_node_title else ""
    names = " › ".join(s.workflow_name for s in chain)
    return f"{names}{step} · {working.agent_name} · {working.progress()}"


def plan_title(snapshot: RunSnapshot, *, queued: bool = False) -> str:
    if queued:
        phase = "Queued — waiting for a free slot"
    elif snapshot.paused and snapshot.phase != RunPhase.RUNNING:
        phase = "Paused"
    else:
        phase = PHASE_WORDS.get(snapshot.phase, snapshot.phase.value)
    title = f"{snapshot.workflow_name} · {phase} · {snapshot.progress()}"
    return blocks.truncate(title, TITLE_LIMIT)


def plan_block(
    snapshot: RunSnapshot,
    graph: Graph,
    agent_name: Callable[[str | None], str],
    details: dict[str, list[str]],
    *,
    queued: bool = False,
) -> BlockJSON:
    done = set(snapshot.steps_completed)
    complete = snapshot.current_node_id is None and snapshot.steps_done > 0 or snapshot.phase == RunPhase.COMPLETED
    current = None if complete else snapshot.current_node_id
    ahead = reachable(graph, current) if current else set()
    tasks: list[TaskCardBlock] = []
    for node in graph.nodes[:MAX_TASKS]:
        title = f"{node.label} · {agent_name(node.agentId)}"
        if node.id == current and snapshot.child is not None:  # a subworkflow node: where its child is
            title = f"{node.label} · {_nested_line(snapshot)}"
        if node.id in done and node.id != current:
            status = "complete"
        elif node.id == current:
            status = "error" if snapshot.phase == RunPhase.FAILED else "in_progress"
        else:
            status = "pending"
            if complete or node.id not in ahead:
                title += " · not taken"
        lines = details.get(node.id, [])
        output = None
        if node.id == current and snapshot.phase == RunPhase.FAILED and snapshot.error:
            output = _rich_text([snapshot.error.message])
        tasks.append(
            TaskCardBlock(
                task_id=node.id[:255],
                title=blocks.truncate(title, TITLE_LIMIT),
                status=status,
                details=_rich_text(lines) if lines else None,
                output=output,
            )
        )
    return blocks.serialise(PlanBlock(title=plan_title(snapshot, queued=queued), tasks=tasks))


def plan_status(
    snapshot: RunSnapshot,
    graph: Graph,
    agent_name: Callable[[str | None], str],
    details: dict[str, list[str]],
    *,
    key: str,
    queued: bool = False,
) -> SlackMessage:
    """The run's status message: the plan, then the buttons that make sense now."""
    out: list[BlockJSON] = [plan_block(snapshot, graph, agent_name, details, queued=queued)]
    if len(graph.nodes) > MAX_TASKS:
        out.append(blocks.context(f"…and {len(graph.nodes) - MAX_TASKS} more steps."))
    cycle = cycle_line(snapshot)
    if cycle:
        out.append(blocks.context(cycle))
    names = blocks.status_controls(snapshot, queued=queued)
    if names:
        out.append(blocks.control_buttons(key, snapshot.run_id, tuple(names)))
    if snapshot.phase == RunPhase.RUNNING and not queued:
        out.append(blocks.context(blocks.STATUS_HINT))
    return SlackMessage(text=plan_title(snapshot, queued=queued), blocks=out)
