"""Builds the thread work from the bot's parts: each step gets the collaborators it uses, nothing more;
with replicas, the hand-over is connected to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from crewagent.core.api.runs import BudgetCheck, Engine

from ..access import AccessPolicy
from ..completion.push import Deliveries
from ..completion.feedback import FeedbackRecorder
from ..completion.uploads import Uploads
from ..config import BotConfig
from ..inbox.file_inbox import FileInbox
from ..native.surface import AgentSurface
from ..slack_port import SlackPort
from ..status import StatusBoard
from .budget_gate import BudgetGate
from .channel_binding import BindingRuntime
from .click_events import ClickEvents
from .event_claim import ClaimStore, Claims
from .form_events import FormEvents
from .intake import ThreadIntake
from .session_calls import CallRunner, Slots, local_slots
from .store import ThreadStore
from .text_events import TextEvents
from .thread_notes import ThreadNotes
from .thread_pipeline import ThreadPipeline
from .thread_state import ThreadState
from .thread_worker import ThreadLanes, ThreadWorker
from .upkeep import Upkeep

if TYPE_CHECKING:
    from ..replicas.handover import Handover
    from ..replicas.threads import PostgresThreadStore


@dataclass(frozen=True)
class Outbound:
    """How the thread work shows itself in Slack: posts and edits, the status board, the agent surface."""

    io: SlackPort
    board: StatusBoard
    surface: AgentSurface | None = None


@dataclass(frozen=True)
class Inbound:
    """How thread events come in: in order per thread (`lanes`), taken once (`claims`: the inbox's), kept until run
    (`inbox`, embedded) or queued for the thread's lease holder (`handover`, replicas), and how many
    runs may pump at once (`slots`: local unless replicas share them)."""

    lanes: ThreadLanes
    claims: ClaimStore
    inbox: FileInbox | None = None
    handover: Handover | None = None
    slots: Slots | None = None


def build_thread_work(
    *,
    config: BotConfig,
    engine: Engine,
    bindings: dict[str, BindingRuntime],
    store: ThreadStore | PostgresThreadStore,
    access: AccessPolicy,
    inbound: Inbound,
    outbound: Outbound,
) -> ThreadIntake:
    runs, io, lanes, handover = engine.runs, outbound.io, inbound.lanes, inbound.handover
    state = ThreadState(store=store, lanes=lanes, bindings=bindings, engine=engine, runs=runs, handover=handover)
    notes = ThreadNotes(io, access)
    deliveries = Deliveries(io, runs, config.git, forge=config.forge)
    upkeep = Upkeep(
        bindings=bindings, runs=runs, engine=engine, lanes=lanes, store=store, io=io,
        resume_on_start=config.resume_on_start,
    )
    runner = CallRunner(
        state=state,
        io=io,
        board=outbound.board,
        slots=inbound.slots or local_slots(config.limits.max_concurrent_runs),
        deliveries=deliveries,
        surface=outbound.surface,
        before_call=upkeep.maybe_tidy,
        budget=_budget_gate(config, engine, io),
    )
    claims = Claims(inbound.claims, when_durable=inbound.inbox is not None)
    clicks = ClickEvents(state=state, notes=notes, uploads=Uploads(io, runs, engine.off_limits), deliveries=deliveries)
    forms = FormEvents(state=state, notes=notes, io=io)
    text = TextEvents(
        config=config, store=store, access=access, claims=claims, notes=notes, io=io,
    )
    pipeline = ThreadPipeline(text=text, clicks=clicks, forms=forms, upkeep=upkeep, runner=runner, claims=claims)
    if handover is not None:  # replicas: the Postgres inbox, drained under the thread's lease
        worker = ThreadWorker(lanes=lanes, queue=handover, run=pipeline.run_event, hold=handover.hold)
    else:  # embedded: the local inbox, drained by the one process that holds every thread
        assert inbound.inbox is not None
        worker = ThreadWorker(lanes=lanes, queue=inbound.inbox, run=pipeline.run_event)
    intake = ThreadIntake(
        config=config,
        state=state,
        worker=worker,
        access=access,
        notes=notes,
        pipeline=pipeline,
        feedback=FeedbackRecorder(runs, io),
        surface=outbound.surface,
    )
    if handover is not None:  # replicas: what the hand-over needs of this replica's thread work
        handover.connect(intake.handover_callbacks())
    elif inbound.inbox is not None:  # embedded: a pause/stop reaches the pumping run as the replicas' NOTIFY does
        inbound.inbox.listen(intake.control_signal)
    return intake


def _budget_gate(config: BotConfig, engine: Engine, io: SlackPort) -> BudgetGate | None:
    """The daily token budgets of `budgets:` (None when none is set)."""
    check = BudgetCheck(config.budgets, engine.store.operator_log, frozenset(config.access.admins))
    return BudgetGate(check, engine.store.operator_log, io) if check.active else None
