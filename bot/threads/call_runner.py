"""Runs one `ThreadCall`: a run slot when the call may ask the model, then the call on the channel's
session service with one `OutputSink`, through which the thread's `ThreadRenderer` draws the outputs as
they happen; when the call returns, the renderer finishes (status, completion) and the record is saved.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from crewagent.core.api.runs import attributed

from ..completion.push import Deliveries
from ..base.thread import ThreadRecord
from ..native.surface import AgentSurface
from ..slack_port import SlackPort
from ..status import StatusBoard
from .budget_gate import BudgetGate
from .renderer import ThreadRenderer
from .output_sink import OutputSink, PhaseWatcher
from .session_calls import OpenThread, ThreadCall, start
from .thread_state import ThreadState


NEW_SESSION = "New conversation"  # a session opened by a bare mention, before anything runs in it


class Slots(Protocol):
    """The cap on concurrent model work: a local semaphore, or slots shared by replicas."""

    def locked(self) -> bool: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: Any) -> Any: ...


class CallRunner:
    def __init__(
        self,
        *,
        state: ThreadState,
        io: SlackPort,
        board: StatusBoard,
        slots: Slots,
        deliveries: Deliveries,
        surface: AgentSurface | None,
        before_call: Callable[[], None],
        budget: BudgetGate | None = None,
    ) -> None:
        self.state = state
        self.io = io
        self.board = board
        self.slots = slots
        self.deliveries = deliveries  # `auto_push: true`
        self.surface = surface  # streams, status line, plan, titles (None: plain posts and edits)
        self.before_call = before_call  # e.g. the hourly worktree clean-up
        self.phase_watchers: list[PhaseWatcher] = []  # told when a thread's run changes phase
        self.budget = budget  # daily token budgets (None: none configured)

    def _renderer(self, call: ThreadCall) -> ThreadRenderer:
        return ThreadRenderer(
            call.record,
            self.io,
            self.board,
            self.state.snapshot,
            fresh_status=call.fresh_status,
            surface=self.surface,
            user=call.user,
            claim=call.claim,
        )

    async def run(self, call: ThreadCall) -> None:
        """Run the call for the thread, draw its outputs, persist the record. What the call spends and decides
        is attributed to the person who acted, in the thread's channel (usage, audit)."""
        with attributed(person=call.user, channel=call.record.key.channel):
            if call.now:
                await self._run_now(call)
            elif not await self._over_budget(call):
                await self._run(call)
        if call.claim is not None:
            await call.claim.settle()  # the call is over: its event counts as handled

    async def _over_budget(self, call: ThreadCall) -> bool:
        """A request that may use the model, refused (and told so) once its person's or channel's budget is spent."""
        if self.budget is None or not call.call.gated or not call.budgeted:
            return False
        return await self.budget.refused(call)

    async def _run(self, call: ThreadCall) -> None:
        record = call.record
        lane = self.state.lanes.lane(record.key)
        if lane is not None:
            lane.live = record
        self.before_call()
        renderer = self._renderer(call)
        sink = OutputSink(record, renderer, self.state.store, self.phase_watchers, call.claim)
        service = self.state.binding(record).service
        lines = self.surface.lines if self.surface is not None else None
        gated = call.call.gated
        working = gated or bool(call.reaction_ts)
        if lines is not None and working:
            lines.working(record.key, reaction_ts=call.reaction_ts)
        self._session_started(call, working)
        try:
            if gated:
                if self.slots.locked():
                    await renderer.show_queued()
                async with self.slots:
                    await start(service, record.session, call.call, sink)
            else:
                await start(service, record.session, call.call, sink)
            await renderer.finish()
            await self._auto_push(record, renderer, call.user)
        finally:
            await self.state.store.put(record)
            if lines is not None:
                lines.done(record.key)
            self._session_settled(record, renderer)

    def _session_started(self, call: ThreadCall, working: bool) -> None:
        """Slack's agent session shows `processing`; a thread's first call names the session it creates."""
        if self.surface is None or not working:
            return
        opening = (call.call.typed.text.strip() or NEW_SESSION) if isinstance(call.call, OpenThread) else None
        self.surface.sessions.processing(call.record.key, title=opening)

    def _session_settled(self, record: ThreadRecord, renderer: ThreadRenderer) -> None:
        """The call is over: the session waits for the person, or is closed when the conversation was left."""
        if self.surface is None:
            return
        if renderer.dismissed and record.session.mode == "idle":
            self.surface.sessions.closed(record.key)
        else:
            self.surface.sessions.waiting(record.key)

    async def _run_now(self, call: ThreadCall) -> None:
        """Pause/stop a pumping run without waiting behind it; outputs go straight to the thread."""
        service = self.state.binding(call.record).service
        await start(service, call.record.session, call.call, self._renderer(call).emit)

    async def _auto_push(self, record: ThreadRecord, renderer: ThreadRenderer, user: str) -> None:
        """`auto_push: true`: a run that has just completed is delivered without the click."""
        binding = self.state.binding(record)
        run_id = renderer.completed_run
        if run_id is None or binding.checkout is None or not binding.checkout.auto_push:
            return
        owner = record.session.owner or user
        await self.deliveries.deliver(
            record.key, binding.checkout, binding.packages, run_id, owner, completion_ts=renderer.completion_ts
        )


def local_slots(max_runs: int) -> Slots:
    return asyncio.Semaphore(max_runs)
