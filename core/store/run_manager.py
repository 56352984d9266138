"""RunManager: create runs, find them again, and describe them in user terms."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..document import state as run_state
from ..base.atomic import atomic_write_text
from ..base.errors import CrewError
from ..base.events import RunPhase, StateUpdated
from ..package.models import Agent, Graph, Package, Workflow
from .runs_model import OfferedStep, RunError, RunRecord, RunSnapshot, RunWorktree, utc_now
from .files import project_id_for
from .protocol import RunStore


def menu_starts(item_workflow: str | None, package: Package, workflow: Workflow) -> bool:
    if not item_workflow:
        return False
    target = package.workflow(item_workflow) or package.workflow_by_path(item_workflow)
    return target is not None and target.id == workflow.id


def default_agent(package: Package, workflow: Workflow) -> Agent:
    """The first agent whose menu starts this workflow, else the package's first agent."""
    for agent in package.agents:
        if any(menu_starts(item.workflow or item.exec, package, workflow) for item in agent.menu):
            return agent
    return package.agents[0]


def resolve_agent(package: Package, agent_id: str | None, workflow: Workflow) -> Agent:
    if not agent_id:
        return default_agent(package, workflow)
    agent = package.agent(agent_id) or package.find_agent(agent_id)
    if agent is None:
        names = ", ".join(a.id for a in package.agents)
        raise CrewError("AGENT_NOT_FOUND", f"Package '{package.id}' has no agent '{agent_id}'. Available: {names}.")
    return agent


@dataclass(frozen=True)
class StateView:
    """The part of a RunSnapshot that comes from the state file (the rest is the RunRecord)."""

    node_id: str | None = None  # None once complete
    node_title: str | None = None
    node_agent_id: str | None = None
    steps_done: int = 0
    artifacts: tuple[str, ...] = ()
    unreadable: RunError | None = None  # the state file is missing or broken
    steps_completed: tuple[str, ...] = ()
    complete: bool = False  # the workflow reached its end: progress counts the path taken, not every branch


def _view(graph: Graph, node_id: str, fm: dict[str, Any], artifacts: Iterable[Any], complete: bool) -> StateView:
    node = graph.node(node_id)
    return StateView(
        node_id=None if complete or node is None else node.id,
        node_title=None if complete or node is None else node.label,
        node_agent_id=node.agentId if node else None,
        steps_done=run_state.steps_done(fm, graph),
        artifacts=tuple(str(a) for a in artifacts),
        steps_completed=tuple(str(s) for s in fm.get("stepsCompleted") or ()),
        complete=complete,
    )


def steps_not_taken(view: StateView, record: RunRecord, nodes: int) -> int:
    """A finished run on a branching graph: the steps of the branches it did not take (0 while it works)."""
    if view.complete or (record.phase is RunPhase.COMPLETED and view.node_id is None):
        return max(0, nodes - view.steps_done)
    return 0


def _initial_state(
    workflow: Workflow, *, run_id: str, agent_id: str, now: str, variables: dict[str, Any] | None
) -> str:
    """The run's first state file from the workflow's template, or STATE_INIT_FAILED saying why not."""
    try:
        return run_state.init_state_text(
            workflow.template,
            workflow.graph,
            run_id=run_id,
            agent_id=agent_id,
            workflow_id=workflow.id,
            now=now,
            variables=variables,
        )
    except CrewError as exc:
        raise CrewError(
            "STATE_INIT_FAILED",
            f"The workflow.md template of '{workflow.id}' cannot become a run state: {exc.message}",
        ) from None


class RunManager:
    def __init__(self, store: RunStore) -> None:
        self.store = store

    @staticmethod
    def new_run_id() -> str:
        """An id for a run about to be created; a surface takes it early to name the run's worktree."""
        return str(uuid.uuid4())

    def create(
        self,
        package: Package,
        workflow_id: str | None,
        agent_id: str | None,
        project_root: str | Path,
        *,
        run_id: str | None = None,
        worktree: RunWorktree | None = None,
        variables: dict[str, Any] | None = None,
        parent: tuple[str, str] | None = None,
        extra: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> RunRecord:
        """A new run of `project_root` in phase waiting-user; with a `worktree` (made for `run_id`) the run
        works in it instead. A sub-workflow's run also gets the id its caller chose, the variables
        passed in, and `parent` = (caller run id, caller node id)."""
        root = self.store.check_project(project_root)
        workspace = self.store.check_project(worktree.path) if worktree else root
        workflow = package.resolve_workflow(workflow_id)
        agent = resolve_agent(package, agent_id, workflow)
        run_id = run_id or self.new_run_id()
        now = utc_now()
        state_text = _initial_state(workflow, run_id=run_id, agent_id=agent.id, now=now, variables=variables)
        record = RunRecord(
            run_id=run_id,
            project_id=project_id_for(root),
            project_root=str(root),
            package_id=package.id,
            package_root=str(package.root),
            workflow_id=workflow.id,
            active_agent_id=agent.id,
            phase=RunPhase.WAITING_USER,
            created_at=now,
            updated_at=now,
            worktree=worktree,
            parent_run_id=parent[0] if parent else None,
            parent_node_id=parent[1] if parent else None,
            extra=dict(extra or {}),
            session_id=session_id,
        )
        (workspace / "artifacts").mkdir(exist_ok=True)
        self._lay_out(record, state_text)
        return record

    def _lay_out(self, record: RunRecord, state_text: str) -> None:
        """The run's folder, logs and first state on disk, then its index entry and its first audit line."""
        state_dir = self.store.state_dir(record)
        (state_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.store.execution_log(record).touch()
        atomic_write_text(state_dir / run_state.STATE_FILE, state_text)
        # Parsed now, on the thread that creates the run, and remembered: the first snapshot (read on
        # the event loop as the run is announced) then only compares bytes instead of parsing YAML.
        run_state.load_doc(state_dir)
        self.store.save_record(record)
        self.store.audit(
            record,
            "run.created",
            packageId=record.package_id,
            workflowId=record.workflow_id,
            activeAgentId=record.active_agent_id,
        )

    def get(self, run_id: str) -> RunRecord:
        """The run with this id, or with the only id that starts with it (ids are long to type)."""
        wanted = run_id.strip()
        record = self.store.read_record(wanted) if wanted else None
        if record is not None:
            return record
        matches = [r for key, r in self.store.read_index().items() if wanted and key.startswith(wanted)]
        if len(matches) == 1:
            return matches[0]
        if matches:
            ids = ", ".join(sorted(r.run_id for r in matches)[:5])
            raise CrewError(
                "RUN_AMBIGUOUS", f"'{wanted}' starts {len(matches)} run ids ({ids}); give more of the id."
            )
        raise CrewError("RUN_NOT_FOUND", f"No run with id '{run_id}'. List runs with `crewagent runs list`.")

    def list(self, project_root: str | Path | None = None) -> list[RunRecord]:
        """Newest first; optionally only the runs of one project."""
        records = list(self.store.read_index().values())
        if project_root is not None:
            pid = project_id_for(project_root)
            records = [r for r in records if r.project_id == pid]
        return sorted(records, key=lambda r: r.created_at, reverse=True)

    def latest(self, project_root: str | Path, package_id: str | None = None) -> RunRecord | None:
        """The newest run a user started (sub-workflow runs continue through their caller)."""
        for record in self.list(project_root):
            if record.parent_run_id is None and (package_id is None or record.package_id == package_id):
                return record
        return None

    def root_of(self, record: RunRecord) -> RunRecord:
        """The run a user started, for a sub-workflow's run: resuming it resumes the whole chain."""
        return self._chain_end(record, lambda r: r.parent_run_id)

    def asking(self, record: RunRecord) -> RunRecord:
        """The run whose question a waiting run waits on: itself, or the sub-workflow it called."""
        return self._chain_end(record, lambda r: r.child_run_id)

    def _chain_end(self, record: RunRecord, link: Callable[[RunRecord], str | None]) -> RunRecord:
        seen = {record.run_id}
        while (next_id := link(record)) and next_id not in seen:
            found = self.store.read_record(next_id)
            if found is None:
                break
            seen.add(found.run_id)
            record = found
        return record

    def update(self, record: RunRecord) -> None:
        record.updated_at = utc_now()
        self.store.save_record(record)

    def state_view(self, record: RunRecord, package: Package) -> StateView:
        """What the run's state file says, in snapshot terms (one read of workflow.md)."""
        graph = (package.workflow(record.workflow_id) or package.default_workflow).graph
        try:
            fm = run_state.read_state(self.store.state_dir(record))
        except CrewError as exc:
            return StateView(unreadable=RunError(code=exc.code, message=exc.message))
        node_id = graph.effective_node_id(fm.get("currentNodeId"))
        return _view(graph, node_id, fm, fm.get("artifacts", []), run_state.is_complete(fm, graph))

    def updated_view(self, record: RunRecord, package: Package, event: StateUpdated) -> StateView:
        """The view of the state a StateUpdated event reports: the state the engine has just written,
        so a surface following the pump needs no read of workflow.md."""
        graph = (package.workflow(record.workflow_id) or package.default_workflow).graph
        fm = {"stepsCompleted": event.steps_completed}
        return _view(graph, event.current_node_id, fm, event.artifacts, event.complete)

    def snapshot(
        self,
        record: RunRecord,
        package: Package,
        view: StateView | None = None,
        *,
        child_view: StateView | None = None,
    ) -> RunSnapshot:
        """The run in user terms, with the sub-workflow it waits on nested. Pass the views already read
        when the state files have not changed since (a surface following a pump's events): then the
        snapshot costs no file access."""
        child = None
        if record.child_run_id:
            child_record = self.store.read_record(record.child_run_id)
            if child_record is not None:
                child = self.snapshot(child_record, package, child_view)
        if view is None:
            view = self.state_view(record, package)
        workflow = package.workflow(record.workflow_id) or package.default_workflow
        agent_id = view.node_agent_id or record.active_agent_id
        agent = package.agent(agent_id)
        starter = package.agent(record.active_agent_id)
        return RunSnapshot(
            run_id=record.run_id,
            workflow_id=workflow.id,
            workflow_name=workflow.display_name,
            phase=record.phase,
            paused=record.paused,
            current_node_id=view.node_id,
            current_node_title=view.node_title,
            agent_id=agent_id,
            agent_name=agent.display_name if agent else agent_id,
            run_agent_id=record.active_agent_id,
            run_agent_name=starter.display_name if starter else record.active_agent_id,
            steps_done=view.steps_done,
            steps_total=len(workflow.graph.nodes),
            steps_not_taken=steps_not_taken(view, record, len(workflow.graph.nodes)),
            artifacts=list(view.artifacts),
            error=record.last_error or view.unreadable,
            usage=record.usage,
            branch=record.worktree.branch if record.worktree else None,
            pushed=record.delivery is not None,
            pull_request_url=record.delivery.pull_request_url if record.delivery else None,
            steps_completed=list(view.steps_completed),
            child=child,
            next_steps=_offered(record, package),
            cycle=[name for name in record.extra.get("cycle", []) if isinstance(name, str)],
        )


def _offered(record: RunRecord, package: Package) -> list[OfferedStep]:
    """The package's next steps after this run's workflow; a sub-workflow's run offers none of its own."""
    if record.parent_run_id is not None:
        return []
    offered = []
    for step in package.next_after(record.workflow_id):
        workflow = package.workflow(step.workflow)
        agent = package.agent(step.agent or record.active_agent_id)
        if workflow is not None and agent is not None:
            offered.append(OfferedStep(workflow_id=workflow.id, label=step.label, agent_name=agent.display_name,
                                       back=step.back))
    return offered
