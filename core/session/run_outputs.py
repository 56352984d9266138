"""A run's engine events, as the session's outputs: what a surface draws while the run pumps."""

from __future__ import annotations

from ..base.events import AssistantText, AssistantTextDelta, EngineEvent, StateUpdated, WidgetRequested
from ..package.models import Package
from ..store.run_manager import StateView
from ..store.runs_model import RunRecord, RunSnapshot
from .context import Deps, OutputStream, card
from .model import PendingWidget, Session
from .outputs import Reply, ReplyDelta, RunProgress, WidgetRequest


class RunOutputs:
    """One pump's engine events, turned into RunProgress / Reply / WidgetRequest outputs as they happen.

    The state file is read once when the pump starts reporting; after that every state write
    reaches us as a StateUpdated event that carries what was written, and other events only move
    the run record, which is in memory. Re-reading workflow.md for every event was a large share
    of a busy bot's CPU. A sub-workflow's events (its own run id) keep a view of their own, and
    the snapshot shows that run nested in the bound one.
    """

    def __init__(self, deps: Deps, session: Session, record: RunRecord, package: Package, out: OutputStream) -> None:
        self.deps = deps
        self.session = session
        self.record = record
        self.package = package
        self.out = out
        self._views: dict[str, StateView] = {}
        self._children: dict[str, RunRecord] = {}

    async def on_event(self, event: EngineEvent) -> None:
        record, package, out = self.record, self.package, self.out
        if isinstance(event, AssistantTextDelta):
            if out.streams:
                speaker = package.agent(event.agent_id or "")
                agent = card(speaker) if speaker else None
                delta = ReplyDelta(
                    text=event.text, turn=event.turn, agent=agent, run_id=record.run_id, restart=event.restart
                )
                await out.put(delta)
        elif isinstance(event, AssistantText):
            speaker = package.agent(event.agent_id or "")
            await out.put(Reply(text=event.text, agent=card(speaker) if speaker else None, run_id=record.run_id))
        elif isinstance(event, WidgetRequested):
            self.session.pending_widget = PendingWidget.from_payload(event.widget, record.run_id)
            await out.put(WidgetRequest(widget=event.widget, run_id=record.run_id))
        else:
            await out.put(RunProgress(event=event, snapshot=self._snapshot(event)))

    def _snapshot(self, event: EngineEvent) -> RunSnapshot:
        runs, record, package, views = self.deps.runs, self.record, self.package, self._views
        run = self._run_of(event.run_id)
        if isinstance(event, StateUpdated):
            views[run.run_id] = runs.updated_view(run, package, event)
        elif run.run_id not in views:
            views[run.run_id] = runs.state_view(run, package)
        if record.run_id not in views:
            views[record.run_id] = runs.state_view(record, package)
        child_view = views.get(record.child_run_id or "")
        return runs.snapshot(record, package, views[record.run_id], child_view=child_view)

    def _run_of(self, run_id: str) -> RunRecord:
        if run_id == self.record.run_id:
            return self.record
        if run_id not in self._children:
            self._children[run_id] = self.deps.runs.get(run_id)
        return self._children[run_id]
