"""What a pump tells the outside world: the run index, the audit log and the surface's events.

A phase change is the only run-index write a pump makes (one as it starts, one as it ends); every
other progress report is an audit line plus an engine event. A failing event handler propagates:
a session's OutputStream is where a surface's rendering bug is caught and logged.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .engine_model import EventSink
from ..base.events import EngineEvent, NodeStarted, PhaseChanged, RunPhase, StateUpdated
from ..document import state as run_state
from ..package.models import Graph
from ..store.run_manager import RunManager
from ..store.runs_model import RunError, RunRecord


class RunReporter:
    def __init__(
        self,
        record: RunRecord,
        runs: RunManager,
        audit: Callable[[dict[str, Any]], None],
        on_event: EventSink | None,
    ) -> None:
        self.record, self.runs, self.audit, self.on_event = record, runs, audit, on_event

    async def emit(self, event: EngineEvent) -> None:
        if self.on_event is None:
            return
        await self.on_event(event)  # a session's OutputStream already keeps a surface's rendering bug out of the run

    async def phase(
        self, phase: RunPhase, *, paused: bool = False, reason: str | None = None, error: RunError | None = None
    ) -> None:
        """Record the new phase in the run index (mutating the record), the audit log and the surface."""
        record = self.record
        previous = record.phase
        record.phase, record.paused = phase, paused
        if error is not None:
            record.last_error = error
        self.runs.update(record)
        code = error.code if error else None
        change = {"from": previous.value, "to": phase.value, "paused": paused, "reason": reason, "code": code}
        self.audit({"kind": "run.phase", **change})
        await self.emit(PhaseChanged(run_id=record.run_id, phase=phase, paused=paused, reason=reason, error_code=code))

    async def state_updated(self, fm: dict[str, Any], graph: Graph, *, node_id: str, complete: bool) -> None:
        steps = list(fm.get("stepsCompleted") or [])
        done = run_state.steps_done(fm, graph)
        self.audit({"kind": "state.updated", "currentNodeId": node_id, "stepsCompleted": steps, "complete": complete})
        await self.emit(
            StateUpdated(
                run_id=self.record.run_id,
                current_node_id=node_id,
                steps_completed=steps,
                steps_total=len(graph.nodes),
                steps_not_taken=len(graph.nodes) - done if complete else 0,  # branches the finished run skipped
                artifacts=[str(a) for a in fm.get("artifacts") or []],
                complete=complete,
            )
        )

    async def node_started(self, graph: Graph, node_id: str, agent_id: str) -> None:
        node = graph.node(node_id)
        if node is not None:
            started = NodeStarted(
                run_id=self.record.run_id,
                node_id=node.id,
                title=node.label,
                agent_id=agent_id,
                workflow_id=self.record.workflow_id,
            )
            await self.emit(started)
