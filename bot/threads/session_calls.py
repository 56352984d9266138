"""A session call: what a thread event turns into, and how it runs.

The event handlers (text, clicks, forms, upkeep) decide one small value per kind of call; `CallRunner`
runs it on the channel's session service: a run slot when the call may ask the model (`gated`), the
person's and channel's budgets, then the call with one `OutputSink`, through which the thread's
`ThreadRenderer` draws the outputs as they happen. When the call returns, the renderer finishes
(status, completion) and the record is saved.

The sink also keeps the thread's bookkeeping in step with the outputs: the thread's link to a run is
saved the moment the run starts (so a crash mid-run can resume it), a switched model before the thread
is told; the event the call answers counts as handled once an output made its effect durable
(bot.threads.event_claim); and the phase watchers (the owner's Home tab) hear when the run changes phase.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, Union

from crewagent.core.api.runs import attributed
from crewagent.core.api.sessions import FormAnswer, outputs, Session, SessionService, TypedText

from ..base.thread import ThreadRecord
from ..completion.push import Deliveries
from ..native.surface import AgentSurface
from ..slack_port import SlackPort
from ..status import StatusBoard
from .budget_gate import BudgetGate
from .event_claim import EventClaim
from .renderer import ThreadRenderer
from .store import ThreadStore
from .thread_state import ThreadState

if TYPE_CHECKING:
    from ..replicas.threads import PostgresThreadStore

Sink = Callable[[outputs.Output], Awaitable[None]]
PhaseWatcher = Callable[[ThreadRecord], None]
SLOT_CONTROLS = frozenset({"resume", "retry"})  # controls that pump the run again
URGENT_COMMANDS = frozenset({"pause", "stop"})  # reach a pumping run at once, outside the thread's order
NEW_SESSION = "New conversation"  # a session opened by a bare mention, before anything runs in it


@dataclass(frozen=True)
class OpenThread:
    """First contact in a new thread (a mention, a DM, `/crew`)."""

    typed: TypedText

    @property
    def gated(self) -> bool:
        return bool(self.typed.text.strip())


@dataclass(frozen=True)
class SayText:
    """The owner's reply in the thread (or a menu number picked from a button); never a `*command`."""

    typed: TypedText
    gated = True


@dataclass(frozen=True)
class ChooseModel:
    """`*model` (which model the thread uses) or `*model NAME` (switch it); never asks the model."""

    typed: TypedText
    gated = False


@dataclass(frozen=True)
class GuestChat:
    """Someone other than the owner chats with the thread's agent."""

    text: str
    gated = True


@dataclass(frozen=True)
class PickAgent:
    agent_id: str
    gated = False


@dataclass(frozen=True)
class AnswerWidget:
    """An answer to the run's (or the agent's) open question, from a button or a form, typed."""

    answer: FormAnswer
    gated = True


@dataclass(frozen=True)
class RunControl:
    """A `*command` or a control button: pause, stop, resume, retry, status, menu, dismiss, help."""

    action: str

    @property
    def gated(self) -> bool:
        return self.action in SLOT_CONTROLS


@dataclass(frozen=True)
class StartNext:
    """A next-step button: start `workflow_id` after the completed run `run_id`, on its branch."""

    run_id: str
    workflow_id: str
    gated = True


SessionCall = Union[OpenThread, SayText, ChooseModel, GuestChat, PickAgent, AnswerWidget, RunControl, StartNext]


@dataclass(frozen=True)
class ThreadCall:
    """One session call for one thread, as an event handler decided it."""

    record: ThreadRecord
    call: SessionCall
    user: str  # who acted (whom a streamed reply is for)
    reaction_ts: str | None = None  # the message to mark as being worked on
    now: bool = False  # pause/stop of a pumping run: no run slot, outputs straight to the thread
    budgeted: bool = True  # False: work a request that passed the budget check already began (a resume at start-up)
    claim: EventClaim | None = None  # the event's dedupe keys, still to be claimed once its effect is durable

    @property
    def fresh_status(self) -> bool:
        """`*status`: the status is posted anew at the bottom of the thread."""
        return isinstance(self.call, RunControl) and self.call.action == "status"


async def start(service: SessionService, session: Session, call: SessionCall, sink: Sink) -> None:
    """Make the call on the service; every output goes to `sink` as it happens (the returned copy is not used)."""
    if isinstance(call, OpenThread):
        await service.open(session, call.typed, emit=sink)
    elif isinstance(call, (SayText, ChooseModel)):
        await service.handle_text(session, call.typed, emit=sink)
    elif isinstance(call, GuestChat):
        await service.guest_chat(session, call.text, emit=sink)
    elif isinstance(call, PickAgent):
        await service.pick_agent(session, call.agent_id, emit=sink)
    elif isinstance(call, StartNext):
        await service.start_next(session, call.run_id, call.workflow_id, emit=sink)
    elif isinstance(call, AnswerWidget):
        await service.handle_widget_submit(session, call.answer, emit=sink)
    else:
        await service.control(session, call.action, emit=sink)  # type: ignore[arg-type]


class Slots(Protocol):
    """The cap on concurrent model work: a local semaphore, or slots shared by replicas."""

    def locked(self) -> bool: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: Any) -> Any: ...


def local_slots(max_runs: int) -> Slots:
    return asyncio.Semaphore(max_runs)


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
        return await self.budget.refused(call.record, call.user)

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


class OutputSink:
    """Where every output of one call goes, as it happens: to the renderer, with the bookkeeping that must
    keep step with what the thread shows (the record, the event's claim, the phase watchers)."""

    def __init__(
        self,
        record: ThreadRecord,
        renderer: ThreadRenderer,
        store: ThreadStore | PostgresThreadStore,
        watchers: list[PhaseWatcher],
        claim: EventClaim | None = None,
    ) -> None:
        self.claim = claim  # the event's claim, settled once an output made its effect durable
        self.record = record
        self.renderer = renderer
        self.store = store
        self.watchers = watchers
        self.saved_run = record.session.run_id
        self.saved_model = record.session.model

    async def __call__(self, output: outputs.Output) -> None:
        if self.record.session.model != self.saved_model:  # a switched model is kept before the thread is told
            await self._save()
        await self.renderer.emit(output)
        if self.claim is not None and not (isinstance(output, outputs.ReplyDelta) and output.run_id is None):
            await self.claim.settle()  # a reply is recorded, or a run took the text: a redo would repeat it
        record = self.record
        if record.session.run_id != self.saved_run:
            # A run just started: its link (and the status message just drawn for it) is stored now, so a
            # crash mid-run can resume it in the same message.
            await self._save()
        if output.kind == "run_progress" and output.event.kind == "phase_changed":
            for watcher in self.watchers:
                watcher(record)

    async def _save(self) -> None:
        self.saved_run, self.saved_model = self.record.session.run_id, self.record.session.model
        await self.store.put(self.record)
