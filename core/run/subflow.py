"""Sub-workflow calls: a `subworkflow` node runs another workflow of the same package as a child run.

The calling run stays on its subworkflow node while the child runs. The child is a run of its own
(record, state, conversation) in the same project; the two records name each other. The caller's
record names the child before the child exists, so a crash at any point finds the same child again.
When the child completes, one guarded state write moves the caller past the node: the node's
`outputs` copied from the child's variables, the child's artifacts appended, the node added to
stepsCompleted. Step frontmatter of the node: `subworkflowRef` (required), `passVariables`.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..document import state as run_state
from ..base.answers import UserInput
from ..base.errors import CrewError
from ..base.events import EngineEvent, RunPhase, SubworkflowReturned, SubworkflowStarted
from .engine_model import EventSink, Intent, PumpResult
from .pump_deps import PumpControl, PumpDeps
from ..package.models import Graph, Node, Package, Workflow
from ..prompts.composer import render
from ..store.run_manager import RunManager
from ..store.runs_model import RunRecord, utc_now
from ..document.codec import render_draft

DESCRIPTION_MAX_CHARS = 4000


@dataclass(frozen=True)
class SubworkflowCall:
    """What one subworkflow node asks for."""

    caller: Workflow
    node: Node
    workflow: Workflow  # the child's
    pass_variables: tuple[str, ...]
    description: str  # the node's step body: shown as a description, never run as a step

    @property
    def next_node_id(self) -> str:
        """Where the caller goes after the call: the default edge, else the only (first) one."""
        edges = self.caller.graph.outgoing(self.node.id)
        edge = next((e for e in edges if e.isDefault), edges[0] if edges else None)
        if edge is None:
            raise CrewError(
                "SUBWORKFLOW_NO_EXIT",
                f"Node '{self.node.id}' of workflow '{self.caller.id}' has no outgoing edge, so the workflow "
                "cannot continue after the sub-workflow. Fix the package (crewagent validate) and Retry.",
            )
        return edge.to


def call_at(package: Package, caller: Workflow, node_id: str) -> SubworkflowCall | None:
    """The call made by `node_id`, or None when that node is not a subworkflow node."""
    node = caller.graph.node(node_id)
    if node is None or node.type != "subworkflow":
        return None
    step = caller.step(node.id)
    front = step.frontmatter if step else {}
    ref = front.get("subworkflowRef")
    child = package.workflow(ref.strip()) if isinstance(ref, str) else None
    if child is None:
        raise CrewError(
            "SUBWORKFLOW_NOT_FOUND",
            f"Node '{node.id}' of workflow '{caller.id}' calls workflow '{ref}', which package '{package.id}' "
            "does not have. Fix the package (crewagent validate) and Retry.",
        )
    passing = front.get("passVariables")
    names = tuple(str(v) for v in passing) if isinstance(passing, list) else ()
    body = step.body.strip() if step else ""
    return SubworkflowCall(caller, node, child, names, body[:DESCRIPTION_MAX_CHARS])


def open_child(
    runs: RunManager, parent: RunRecord, package: Package, call: SubworkflowCall, parent_fm: dict[str, Any],
    agent_id: str,
) -> tuple[RunRecord, bool]:
    """The child run of `call`: the one the caller already waits on, else a new one (True)."""
    if parent.child_run_id:
        existing = runs.store.read_record(parent.child_run_id)
        if existing is not None and existing.parent_run_id == parent.run_id and existing.parent_node_id == call.node.id:
            return existing, False
        child_id = parent.child_run_id if existing is None else str(uuid.uuid4())  # None: the crash came first
    else:
        child_id = str(uuid.uuid4())
    if parent.child_run_id != child_id:
        parent.child_run_id = child_id
        parent.child_run_ids = [*parent.child_run_ids, child_id]
        runs.update(parent)  # named before it exists: a crash from here on finds this id again
    given = parent_fm.get("variables") or {}
    passed = {name: given[name] for name in call.pass_variables if name in given}
    context = render(
        "subworkflow-call",
        caller=call.caller.display_name,
        node_title=call.node.label,
        node_id=call.node.id,
        passed=_inline(passed) if passed else "none",
        outputs=", ".join(call.node.outputs) or "none",
        description=call.description or "(no description)",
    )
    child = runs.create(
        package,
        call.workflow.id,
        agent_id,
        parent.project_root,
        run_id=child_id,
        worktree=parent.worktree,  # the same @project: a git project's run shares its caller's worktree
        variables=passed,
        parent=(parent.run_id, call.node.id),
        extra={"data_context": [context]},
    )
    child.model = parent.model  # the conversation's model choice reaches the sub-workflow's calls too
    return child, True


@dataclass(frozen=True)
class Returned:
    frontmatter: dict[str, Any]  # the caller's state, as now on disk
    variables: dict[str, Any]
    artifacts: list[str]
    note: str  # for the caller's conversation


def return_to_caller(state_dir: Path, call: SubworkflowCall, child_id: str, child_fm: dict[str, Any]) -> Returned:
    """Move the caller past the node with the child's outputs (one guarded, atomic state write)."""
    graph: Graph = call.caller.graph
    child_vars = child_fm.get("variables") or {}
    variables = {name: child_vars[name] for name in call.node.outputs if name in child_vars}
    artifacts = [str(a) for a in child_fm.get("artifacts") or [] if isinstance(a, str)]
    target = call.next_node_id

    def build(doc: run_state.StateDoc | None) -> run_state.Draft:
        if doc is None or doc.frontmatter is None:
            raise CrewError("E_INVALID_FRONTMATTER", f"{run_state.STATE_ALIAS} of the calling run cannot be read.")
        update: dict[str, Any] = {
            "stepsCompleted": {"append": [call.node.id]},
            "currentNodeId": target,
            "artifacts": {"append": artifacts},
            "variables": variables,
            "updatedAt": utc_now(),
        }
        return render_draft(run_state.apply_update(doc.frontmatter, update), doc.body)

    written = run_state.commit_state(state_dir, graph, build, returning=True)
    note = render(
        "subworkflow-returned",
        name=call.workflow.display_name,
        node_id=call.node.id,
        child_run_id=child_id,
        variables=_inline(variables) if variables else "none",
        artifacts=", ".join(artifacts) or "none",
        next_node=target,
    )
    return Returned(written.frontmatter, variables, artifacts, note)


def started_event(record: RunRecord, call: SubworkflowCall, caller_id: str, child: RunRecord, created: bool) -> SubworkflowStarted:
    return SubworkflowStarted(
        run_id=record.run_id,
        node_id=call.node.id,
        caller_workflow_id=caller_id,
        child_run_id=child.run_id,
        workflow_id=call.workflow.id,
        workflow_name=call.workflow.display_name,
        resumed=not created,
    )


def returned_event(record: RunRecord, call: SubworkflowCall, child: RunRecord, returned: Returned) -> SubworkflowReturned:
    return SubworkflowReturned(
        run_id=record.run_id,
        node_id=call.node.id,
        child_run_id=child.run_id,
        workflow_id=call.workflow.id,
        workflow_name=call.workflow.display_name,
        variables=returned.variables,
        artifacts=returned.artifacts,
    )


def _inline(values: dict[str, Any]) -> str:
    text = json.dumps(values, ensure_ascii=False, default=str)
    return text if len(text) <= 1500 else text[:1497] + "..."


# ---- one call, as the calling run's pump makes it ------------------------------------------------


@dataclass(frozen=True)
class Caller:
    """What a sub-workflow call needs of the calling run (handed over by its pump, not the pump itself)."""

    record: RunRecord
    package: Package
    fm: dict[str, Any]
    agent_id: str
    state_dir: Path
    control: PumpControl
    on_event: EventSink | None
    emit: Callable[[EngineEvent], Awaitable[None]]
    audit: Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class ChildOutcome:
    child: RunRecord
    result: PumpResult  # how the child's pump ended
    returned: Returned | None  # set when the child completed and the caller moved past the node


async def run_call(deps: PumpDeps, call: SubworkflowCall, caller: Caller, user_input: UserInput | None) -> ChildOutcome:
    """Pump the child run until it needs the user or completes; on completion move the caller on.

    When the child needs the user (a question, a widget, a pause or stop, a failure), the caller's
    pump ends the same way; its next pump goes on with the child.
    """
    record = caller.record
    child, created = open_child(deps.runs, record, caller.package, call, caller.fm, caller.agent_id)
    await caller.emit(started_event(record, call, call.caller.id, child, created))
    caller.audit({"kind": "subworkflow.started", "nodeId": call.node.id, "childRunId": child.run_id,
                  "workflowId": call.workflow.id, "resumed": not created})
    intent: Intent = "start" if created else ("continue" if user_input else "resume")
    spent_before = child.usage.model_copy()
    sink = _child_sink(caller.on_event, record.run_id)
    result = await deps.run_child(child, caller.package, intent, user_input, sink, caller.control)
    record.usage.add_since(child.usage, spent_before)  # the caller's usage covers its sub-workflows
    if result.phase is not RunPhase.COMPLETED:
        return ChildOutcome(child, result, None)
    child_fm = run_state.read_state(deps.store.state_dir(child))
    returned = return_to_caller(caller.state_dir, call, child.run_id, child_fm)
    record.child_run_id = None
    deps.runs.update(record)
    caller.audit({"kind": "subworkflow.returned", "nodeId": call.node.id, "childRunId": child.run_id,
                  "variables": sorted(returned.variables), "artifacts": returned.artifacts})
    return ChildOutcome(child, result, returned)


def _child_sink(on_event: EventSink | None, parent_id: str) -> EventSink | None:
    """The child's events go to the caller's surface, marked with the caller as their parent."""
    if on_event is None:
        return None

    async def sink(event: EngineEvent) -> None:
        if event.parent_run_id is None:
            event = event.model_copy(update={"parent_run_id": parent_id})
        await on_event(event)

    return sink
