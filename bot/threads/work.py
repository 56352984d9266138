"""What every kind of thread work shares: the thread's record and binding, access checks, refusals, and
`perform`, which runs one session call in the thread's lane and posts its outputs.

Work that may call the model also takes one of the run slots (the concurrency cap).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from core.api.runs import Engine, RunManager, RunSnapshot
from core.api.errors import CrewError
from core.api.sessions import ErrorOutput, Output

from ..render import blocks
from ..access import AccessPolicy, Verdict
from ..base.actions import ButtonValue, Clicked
from ..config import BotConfig
from .dedupe import Deduper
from ..completion.push import Deliveries
from ..completion.feedback import FeedbackRecorder
from .lanes import ThreadLanes
from .view import ThreadRenderer
from ..slack_io import SlackIO
from ..status import StatusBoard
from ..native.surface import AgentSurface
from ..base.thread import ThreadKey, ThreadRecord
from ..replicas.handover import Handover
from .store import ThreadStore
from ..completion.uploads import Uploads
from .binding import BindingRuntime
from .upkeep import Upkeep

if TYPE_CHECKING:
    from ..replicas.threads import PostgresThreadStore

log = logging.getLogger(__name__)

Emit = Callable[[Output], Awaitable[None]]
SessionCall = Callable[[Emit], Awaitable[list[Output]]]
URGENT_COMMANDS = frozenset({"pause", "stop"})
INTERNAL_ERROR = (
    "Something went wrong on my side while handling that. Please try again; "
    "if it keeps happening, tell whoever runs this bot."
)


class Slots(Protocol):
    """The cap on concurrent model work: a local semaphore, or slots shared by replicas."""

    def locked(self) -> bool: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: Any) -> Any: ...


class ThreadWork:
    """The state and helpers every kind of thread work uses (one instance: the Dispatcher)."""

    def __init__(
        self,
        *,
        config: BotConfig,
        io: SlackIO,
        store: ThreadStore | PostgresThreadStore,
        lanes: ThreadLanes,
        board: StatusBoard,
        access: AccessPolicy,
        bindings: dict[str, BindingRuntime],
        engine: Engine,
        runs: RunManager,
        deduper: Deduper,
        handover: Handover | None = None,
        slots: Slots | None = None,
        surface: AgentSurface | None = None,
    ) -> None:
        self.config = config
        self.surface = surface  # streams, status line, plan, titles (None: plain posts and edits)
        self.feedback = FeedbackRecorder(runs, io)
        self.io = io
        self.store = store
        self.lanes = lanes
        self.board = board
        self.access = access
        self.bindings = bindings
        self.engine = engine
        self.runs = runs
        self.deduper = deduper
        self.handover = handover  # replicas over Postgres: thread work goes through their shared queue
        self.slots: Slots = slots or asyncio.Semaphore(config.limits.max_concurrent_runs)
        self.deliveries = Deliveries(io, runs, config.git)  # Commit & push
        self.uploads = Uploads(io, runs)  # file buttons
        self.phase_watchers: list[Callable[[ThreadRecord], None]] = []  # told when a thread's run changes phase
        self.upkeep = Upkeep(bindings, runs, engine, lanes)  # checkouts, clean-up, resume after restart

    def binding(self, record: ThreadRecord) -> BindingRuntime:
        return self.bindings.get(record.binding) or self.bindings["default"]

    def pumping(self, record: ThreadRecord | None) -> bool:
        run_id = record.session.run_id if record else None
        return bool(run_id) and self.engine.is_pumping(run_id)

    def live_record(self, key: ThreadKey) -> ThreadRecord | None:
        lane = self.lanes.lane(key)
        return lane.live if lane else None

    async def snapshot(self, record: ThreadRecord, run_id: str) -> RunSnapshot | None:
        """The stored run as it is now (index entry + state file), read in one worker-thread hop."""
        binding = self.binding(record)

        def read() -> RunSnapshot | None:
            try:
                run = self.runs.get(run_id)
            except CrewError:
                return None
            package = binding.package(run.package_id)
            return self.runs.snapshot(run, package) if package is not None else None

        if self.handover is not None and not self.engine.is_pumping(run_id):
            run = await asyncio.to_thread(self.runs.store.read_record, run_id)
            if run is not None:
                await self.handover.refresh(record.key, run)  # another replica may have moved it on
        return await asyncio.to_thread(read)

    async def idle_run(self, key: ThreadKey) -> str | None:
        """The thread's current run, if this replica is not pumping it."""
        record = await self.store.get(key)
        run_id = record.session.run_id if record else None
        return run_id if run_id and not self.engine.is_pumping(run_id) else None

    def stop_local_runs(self) -> None:
        for run_id in self.engine.pumping_runs():
            self.engine.request_stop(run_id)

    async def _load(self, key: ThreadKey) -> ThreadRecord | None:
        return self.live_record(key) or await self.store.get(key)

    async def _refuse(self, key: ThreadKey, user: str, text: str) -> None:
        await self.io.ephemeral(key.channel, user, text, thread_ts=key.thread_ts)

    async def _call(
        self, call: SessionCall, renderer: ThreadRenderer, emit: Callable[[Output], Awaitable[None]] | None = None
    ) -> list[Output]:
        try:
            return await call(emit or renderer.emit)
        except CrewError as exc:
            return [ErrorOutput(code=exc.code, message=exc.message)]
        except Exception:
            log.exception("session call failed", extra={"slack_thread": renderer.key})
            return [ErrorOutput(code="INTERNAL", message=INTERNAL_ERROR)]

    async def perform(
        self,
        record: ThreadRecord,
        call: SessionCall,
        *,
        user: str,
        gated: bool,
        reaction_ts: str | None = None,
        fresh_status: bool = False,
    ) -> None:
        """Run one session call for the thread, post its outputs, persist the record."""
        lane = self.lanes.lane(record.key)
        if lane is not None:
            lane.live = record
        self.upkeep.maybe_tidy()
        renderer = ThreadRenderer(
            record, self.io, self.board, self.snapshot, fresh_status=fresh_status, surface=self.surface, user=user
        )
        saved_run = record.session.run_id

        async def emit(output: Output) -> None:
            nonlocal saved_run
            await renderer.emit(output)
            if record.session.run_id != saved_run:
                # A run just started: store the thread's link to it now, so a crash mid-run can resume it.
                saved_run = record.session.run_id
                await self.store.put(record)
            if output.kind == "run_progress" and output.event.kind == "phase_changed":
                for watcher in self.phase_watchers:  # e.g. the owner's Home tab
                    watcher(record)

        lines = self.surface.lines if self.surface is not None else None
        if lines is not None and (gated or reaction_ts):
            lines.working(record.key, reaction_ts=reaction_ts)
        try:
            if gated:
                if self.slots.locked():
                    await renderer.show_queued()
                async with self.slots:
                    outputs = await self._call(call, renderer, emit)
            else:
                outputs = await self._call(call, renderer, emit)
            for output in outputs:
                await renderer.emit(output)
            await renderer.finish()
            await self._auto_push(record, renderer, user)
        finally:
            await self.store.put(record)
            if lines is not None:
                lines.done(record.key)

    async def _control_now(self, record: ThreadRecord, user: str, command: str) -> None:
        """Pause/stop a pumping run without waiting behind it; outputs go straight to the thread."""
        if not await self._permitted(record.key, record, user):
            return
        renderer = ThreadRenderer(record, self.io, self.board, self.snapshot, surface=self.surface, user=user)
        service = self.binding(record).service
        outputs = await self._call(lambda emit: service.control(record.session, command, emit=emit), renderer)
        for output in outputs:
            await renderer.emit(output)

    def _may_act_here(self, key: ThreadKey, record: ThreadRecord, user: str) -> Verdict:
        """Allowed to use the bot in this channel, and to act in this thread."""
        used = self.access.may_use(user, key.channel, is_dm=key.is_dm)
        return used if not used.allowed else self.access.may_act(user, record.session)

    async def _permitted(self, key: ThreadKey, record: ThreadRecord, user: str) -> bool:
        """`_may_act_here`, with an ephemeral refusal when not."""
        verdict = self._may_act_here(key, record, user)
        if not verdict.allowed:
            await self._refuse(key, user, verdict.reason)
        return verdict.allowed

    async def _clicked(
        self,
        job: Callable[..., Awaitable[None]],
        key: ThreadKey,
        value: ButtonValue,
        user: str,
        clicked: Clicked | None,
        record: ThreadRecord | None = None,
    ) -> None:
        """Every click: the thread must exist and the user must be allowed to act in it, before anything else."""
        record = record or await self._load(key)
        if record is None:
            await self._refuse(key, user, "This conversation is no longer available. Mention me to start a new one.")
            return
        if not await self._permitted(key, record, user):
            return
        await job(key, record, value, user, clicked)

    async def _name(self, user: str) -> str:
        """How a user is named in a message everyone sees (posted text never mentions anyone)."""
        name, _ = await self.io.user_identity(user)
        return name or "a member of this channel"

    async def _settle(self, key: ThreadKey, clicked: Clicked | None, outcome: str) -> None:
        """Replace the clicked message's buttons with what was done, so it cannot be used twice."""
        if clicked is not None:
            await self.io.update(key.channel, clicked.ts, blocks.settled(clicked, outcome))

    def _pending(self, record: ThreadRecord, value: ButtonValue) -> dict[str, Any] | None:
        pending = record.session.pending_widget
        if pending is None or pending.widget_id != value.w:
            return None
        if value.r and pending.run_id and pending.run_id != value.r:
            return None
        return pending.payload

    async def submit_widget(self, record: ThreadRecord, widget_id: str, answer: Any, user: str) -> None:
        service, session = self.binding(record).service, record.session
        await self.perform(
            record,
            lambda emit: service.handle_widget_submit(session, widget_id, answer, emit=emit),
            user=user,
            gated=True,
        )

    async def _auto_push(self, record: ThreadRecord, renderer: ThreadRenderer, user: str) -> None:
        """`auto_push: true`: a run that has just completed is delivered without the click."""
        binding = self.binding(record)
        run_id = renderer.completed_run
        if run_id is None or binding.checkout is None or not binding.checkout.auto_push:
            return
        owner = record.session.owner or user
        await self.deliveries.deliver(
            record.key, binding.checkout, binding.packages, run_id, owner, completion_ts=renderer.completion_ts
        )
