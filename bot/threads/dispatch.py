"""Thread work: one user action (a reply, a click, a form) applied to the thread's session, and its outputs posted.

Handlers only parse Slack payloads and queue work here. Work for one thread runs in that
thread's lane, in order; work that may call the model also takes one of the run slots
(the concurrency cap). `*pause` / `*stop` skip the lane so they reach a pumping run at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from core.api.checkout import Checkout
from core.api.runs import Engine
from core.api.errors import CrewError
from core.api.events import RunPhase
from core.api.sessions import ErrorOutput, Output
from core.api.packages import Package
from core.api.sessions import parse_global_command
from core.api.runs import RunManager
from core.api.runs import RunSnapshot
from core.api.sessions import SessionService

from .. import actions as act
from ..render import blocks
from ..access import AccessPolicy, Verdict, parse_handover
from ..actions import ButtonValue, Clicked
from ..native.agent_view import suggested_prompts
from ..completion.artifacts import ArtifactUnavailable, read_artifact
from ..config import BotConfig
from .dedupe import Deduper
from ..completion.delivery import Deliveries
from ..completion.feedback import FeedbackRecorder
from ..render.forms import FormContext, build_modal
from .lanes import ThreadLanes
from ..render.mrkdwn import escape
from ..render.thread import ThreadRenderer
from ..slack_io import SlackIO, upload_refusal
from ..status import StatusBoard
from ..native.surface import AgentSurface
from ..replicas.event import ThreadEvent
from .store import ThreadKey, ThreadRecord, ThreadStore
from ..render.widgets import answered_text, answer_for, form_answered, form_mode

if TYPE_CHECKING:
    from ..replicas.handover import Handover
    from ..replicas.threads import PostgresThreadStore

log = logging.getLogger(__name__)

Emit = Callable[[Output], Awaitable[None]]
SessionCall = Callable[[Emit], Awaitable[list[Output]]]

TIDY_INTERVAL = 3600.0  # seconds between clean-ups of old run worktrees
READ_ONLY_COMMANDS = frozenset({"status"})  # what a non-owner may type in someone else's thread
CONTROL_DONE = {"retry": "Retried", "resume": "Resumed"}
URGENT_COMMANDS = frozenset({"pause", "stop"})
INTERNAL_ERROR = (
    "Something went wrong on my side while handling that. Please try again; "
    "if it keeps happening, tell whoever runs this bot."
)
BUSY_NOTE = (
    "Still working on the run — your reply goes to it when it stops. Type `*pause` or `*stop` to interrupt it."
)


@dataclass
class BindingRuntime:
    """One channel binding at run time: its project, its loaded packages and their session service."""

    name: str
    project: Path
    packages: list[Package]
    service: SessionService
    checkout: Checkout | None = None  # None: a plain folder, as before

    def package(self, package_id: str | None) -> Package | None:
        return next((p for p in self.packages if p.id == package_id), None)


class Slots(Protocol):
    """The cap on concurrent model work: a local semaphore, or slots shared by replicas."""

    def locked(self) -> bool: ...

    async def __aenter__(self) -> Any: ...

    async def __aexit__(self, *exc: Any) -> Any: ...


class Dispatcher:
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
        if handover is not None:
            handover.dispatcher = self
        self.slots: Slots = slots or asyncio.Semaphore(config.limits.max_concurrent_runs)
        self.deliveries = Deliveries(io, runs, config.git)
        self.phase_watchers: list[Callable[[ThreadRecord], None]] = []  # told when a thread's run changes phase
        self._tidied_at = 0.0

    # ---- helpers ----------------------------------------------------------------

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
        self.maybe_tidy()
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

    # ---- typed text -------------------------------------------------------------

    async def on_text(
        self, key: ThreadKey, user: str, text: str, message_ts: str, *, opening: bool, dedupe: list[str]
    ) -> None:
        """A thread reply, a mention or a DM, queued for the thread (before Slack gets its ack)."""
        command = parse_global_command(text)
        event = ThreadEvent(
            kind="text", thread=str(key), user=user, text=text, message_ts=message_ts, opening=opening, dedupe=dedupe
        )
        if self.handover is not None:
            signal = None
            if command in URGENT_COMMANDS or command is None:
                # Reaches the replica pumping the run, if any: it stops the run, or says the reply waits.
                # The command alone: a NOTIFY payload is limited to 8000 bytes.
                signal = event.model_copy(update={"text": f"*{command}" if command else ""})
            await self.handover.push(event, signal)
            return
        live = self.live_record(key)
        if live is not None and self.pumping(live):
            if command in URGENT_COMMANDS:
                self.lanes.spawn(self._urgent(live, user, command, dedupe), name=f"urgent:{key}")
                return
            if command is None and self.access.may_act(user, live.session).allowed:
                # Queued behind the pump; the user is told why nothing happens yet.
                self.lanes.spawn(self._refuse(key, user, BUSY_NOTE), name=f"busy:{key}")
        self.lanes.submit(key, lambda: self.run_event(event))

    async def run_event(self, event: ThreadEvent) -> None:
        """The thread's work for one event, in the thread's order."""
        key = event.key
        if event.kind == "text":
            await self._text(key, event.user, event.text, event.message_ts, opening=event.opening, dedupe=event.dedupe)
        elif event.kind == "click" and event.value is not None:
            if event.dedupe and not await self.deduper.claim_persisted(event.dedupe):
                return  # already handled as an urgent control by the replica pumping the run
            job = {
                act.AGENT: self._agent_click,
                act.MENU: self._menu_click,
                act.WIDGET: self._widget_click,
                act.CONTROL: self._control_click,
                act.DELIVER: self._deliver_click,
            }.get(event.click)
            if job is not None:
                await self._clicked(job, key, event.value, event.user, event.clicked)
        elif event.kind == "form" and event.form is not None:
            await self._form_answer(key, event.form, event.answer, event.user)

    def control_signal(self, event: ThreadEvent) -> None:
        """A pause/stop sent to any replica: acted on here if this replica pumps the thread's run."""
        live = self.live_record(event.key)
        if live is None or not self.pumping(live):
            return
        if event.kind == "text":
            command = parse_global_command(event.text) if event.text else None
            if command in URGENT_COMMANDS:
                self.lanes.spawn(self._urgent(live, event.user, command, event.dedupe), name=f"urgent:{event.key}")
            elif not event.text and self.access.may_act(event.user, live.session).allowed:
                self.lanes.spawn(self._refuse(event.key, event.user, BUSY_NOTE), name=f"busy:{event.key}")
        elif event.kind == "click" and event.value is not None:
            value = event.value

            async def stop_now() -> None:
                if await self.deduper.claim_persisted(event.dedupe):
                    await self._clicked(self._control_click, event.key, value, event.user, event.clicked, live)

            self.lanes.spawn(stop_now(), name=f"urgent:{event.key}")

    async def _urgent(self, record: ThreadRecord, user: str, command: str, dedupe: list[str]) -> None:
        if not await self.deduper.claim_persisted(dedupe):
            return
        await self._control_now(record, user, command)

    async def _control_now(self, record: ThreadRecord, user: str, command: str) -> None:
        """Pause/stop a pumping run without waiting behind it; outputs go straight to the thread."""
        if not await self._permitted(record.key, record, user):
            return
        renderer = ThreadRenderer(record, self.io, self.board, self.snapshot, surface=self.surface, user=user)
        service = self.binding(record).service
        outputs = await self._call(lambda emit: service.control(record.session, command, emit=emit), renderer)
        for output in outputs:
            await renderer.emit(output)

    async def _text(
        self, key: ThreadKey, user: str, text: str, message_ts: str, *, opening: bool, dedupe: list[str]
    ) -> None:
        record = await self.store.get(key)
        if record is None and not opening:
            return  # not a conversation of ours
        if not await self.deduper.claim_persisted(dedupe):
            return
        verdict = self.access.may_use(user, key.channel, is_dm=key.is_dm)
        if not verdict.allowed:
            await self._refuse(key, user, verdict.reason)
            return
        if record is None:
            record = ThreadRecord.new(key, owner=user, binding=self.config.binding_name(key.channel))
            service = self.binding(record).service
            session = record.session
            await self.perform(
                record,
                lambda emit: service.open(session, text, emit=emit),
                user=user,
                gated=bool(text.strip()),
                reaction_ts=message_ts,
            )
            return
        service = self.binding(record).service
        session = record.session
        handover = parse_handover(text)
        if handover is not None:
            await self._hand_over(record, user, handover)
            return
        command = parse_global_command(text)
        acting = self.access.may_act(user, session)
        if not acting.allowed:
            await self._as_guest(record, user, text, command, message_ts, acting)
            return
        if command is not None:
            await self.perform(
                record,
                lambda emit: service.control(session, command, emit=emit),
                user=user,
                gated=command in ("resume", "retry"),
                fresh_status=command == "status",
            )
            return
        await self.perform(
            record,
            lambda emit: service.handle_text(session, text, emit=emit),
            user=user,
            gated=True,
            reaction_ts=message_ts,
        )

    async def _as_guest(
        self, record: ThreadRecord, user: str, text: str, command: str | None, message_ts: str, refusal: Verdict
    ) -> None:
        """Someone else's thread: they may ask for the status or chat with the agent, nothing more."""
        service, session = self.binding(record).service, record.session
        if command in READ_ONLY_COMMANDS:
            await self.perform(
                record, lambda emit: service.control(session, "status", emit=emit), user=user, gated=False,
                fresh_status=True,
            )
            return
        if command is not None or session.mode == "idle" or not text.strip():
            await self._refuse(record.key, user, refusal.reason)
            return
        await self.perform(
            record,
            lambda emit: service.guest_chat(session, text, emit=emit),
            user=user,
            gated=True,
            reaction_ts=message_ts,
        )

    async def _hand_over(self, record: ThreadRecord, user: str, target: str) -> None:
        verdict = self.access.may_hand_over(user, record.session)
        if not verdict.allowed:
            await self._refuse(record.key, user, verdict.reason)
            return
        if not target:
            await self._refuse(record.key, user, "Name the new owner: `*handover @someone`.")
            return
        record.session.owner = target
        await self.store.put(record)
        giver, taker = await self._name(user), await self._name(target)
        text = (
            f"{giver} handed this thread over to {taker}. From now on only {taker} (or an admin) "
            "can start runs, answer questions and steer them here."
        )
        await self.io.post(record.channel, record.thread_ts, blocks.notice(text))

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

    # ---- clicks -----------------------------------------------------------------

    async def on_click(
        self,
        kind: str,
        value: ButtonValue,
        *,
        user: str,
        channel: str,
        trigger_id: str | None,
        clicked: Clicked | None = None,
    ) -> None:
        key = ThreadKey.parse(value.s)
        if key is None or key.channel != channel:
            return  # not a value we produced for this channel
        urgent = kind == act.CONTROL and value.x in URGENT_COMMANDS
        if urgent and self.handover is None:
            live = self.live_record(key)
            if live is not None and self.pumping(live):
                urgent_click = self._clicked(self._control_click, key, value, user, clicked, live)
                self.lanes.spawn(urgent_click, name=f"urgent:{key}")
                return
        if kind == act.FORM:
            self.lanes.spawn(self._open_form(key, value, user, trigger_id, clicked), name=f"form:{key}")
            return
        if kind == act.ARTIFACT:
            self.lanes.spawn(self._clicked(self._upload, key, value, user, clicked), name=f"upload:{key}")
            return
        if kind == act.FEEDBACK:
            self.lanes.spawn(self.feedback.record(key, value, user), name=f"feedback:{key}")
            return
        if kind not in (act.AGENT, act.MENU, act.WIDGET, act.CONTROL, act.DELIVER):
            return
        event = ThreadEvent(kind="click", thread=str(key), user=user, click=kind, value=value, clicked=clicked)
        if self.handover is not None:
            event.dedupe = [f"click:{uuid.uuid4().hex}"]  # the urgent path and the queued one share it
            # The signal leaves the clicked message out: a NOTIFY payload is limited to 8000 bytes.
            await self.handover.push(event, event.model_copy(update={"clicked": None}) if urgent else None)
            return
        self.lanes.submit(key, lambda: self.run_event(event))

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

    async def _agent_click(
        self, key: ThreadKey, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> None:
        if value.e != record.epoch or not value.a:
            await self._refuse(key, user, "That agent list is out of date; use the newest message in this thread.")
            return
        service, session, agent_id = self.binding(record).service, record.session, value.a
        await self.perform(
            record, lambda emit: service.pick_agent(session, agent_id, emit=emit), user=user, gated=False
        )

    async def _menu_click(
        self, key: ThreadKey, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> None:
        in_run = record.session.mode == "run" and not record.session.menu_open
        if value.e != record.epoch or value.n is None or in_run:
            await self._refuse(key, user, "That menu is out of date; type `*menu` for the current one.")
            return
        service, session, text = self.binding(record).service, record.session, str(value.n)
        await self.perform(record, lambda emit: service.handle_text(session, text, emit=emit), user=user, gated=True)

    def _pending(self, record: ThreadRecord, value: ButtonValue) -> dict[str, Any] | None:
        pending = record.session.pending_widget
        if pending is None or pending.widget_id != value.w:
            return None
        if value.r and pending.run_id and pending.run_id != value.r:
            return None
        return pending.payload

    async def _widget_click(
        self, key: ThreadKey, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> None:
        widget = self._pending(record, value)
        if widget is None:
            await self._refuse(key, user, "That question has already been answered (or the run moved on).")
            return
        ok, answer = answer_for(widget, value, user)
        if not ok:
            await self._refuse(key, user, "That answer is not one of the options any more.")
            return
        await self._settle(key, clicked, answered_text(widget, value, await self._name(user)))
        await self.submit_widget(record, str(value.w), answer, user)

    async def submit_widget(self, record: ThreadRecord, widget_id: str, answer: Any, user: str) -> None:
        service, session = self.binding(record).service, record.session
        await self.perform(
            record,
            lambda emit: service.handle_widget_submit(session, widget_id, answer, emit=emit),
            user=user,
            gated=True,
        )

    async def _control_click(
        self, key: ThreadKey, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> None:
        action = value.x or ""
        session = record.session
        if action == "retry" and not value.r:
            await self._retry_chat(key, record, user, clicked)
            return
        if not value.r or value.r != session.run_id:
            await self._refuse(key, user, "That run is no longer the active run of this thread.")
            return
        snapshot = await self.snapshot(record, value.r)
        allowed = set(blocks.controls_for(snapshot)) if snapshot else set()
        if snapshot and snapshot.phase == RunPhase.RUNNING and not self.pumping(record):
            allowed.add("resume")  # left running by a restart
        allowed.add("status")
        if action not in allowed:
            phase = blocks.phase_label(snapshot) if snapshot else "gone"
            await self._refuse(
                key, user, f"That button is out of date: the run is {phase} now, so there is nothing to {action}."
            )
            return
        if action in URGENT_COMMANDS and self.pumping(record):
            await self._control_now(record, user, action)
            return
        if action in ("retry", "resume"):
            await self._settle(key, clicked, f"{CONTROL_DONE[action]} by {escape(await self._name(user))}.")
        service = self.binding(record).service
        await self.perform(
            record,
            lambda emit: service.control(session, action, emit=emit),
            user=user,
            gated=action in ("resume", "retry"),
            fresh_status=action == "status",
        )

    async def _retry_chat(self, key: ThreadKey, record: ThreadRecord, user: str, clicked: Clicked | None) -> None:
        """Retry of a failed agent or chat answer (no run involved): ask the model again."""
        session = record.session
        if session.retry_text is None or session.mode not in ("agent", "chat"):
            await self._refuse(key, user, "That Retry button is out of date: there is no failed answer to retry now.")
            return
        await self._settle(key, clicked, f"Retried by {escape(await self._name(user))}.")
        service = self.binding(record).service
        await self.perform(record, lambda emit: service.control(session, "retry", emit=emit), user=user, gated=True)

    # ---- forms ------------------------------------------------------------------

    async def _open_form(
        self, key: ThreadKey, value: ButtonValue, user: str, trigger_id: str | None, clicked: Clicked | None
    ) -> None:
        record = await self._load(key)
        if record is None:
            await self._refuse(key, user, "This conversation is no longer available.")
            return
        if not await self._permitted(key, record, user):
            return
        widget = self._pending(record, value)
        if widget is None:
            await self._refuse(key, user, "That question has already been answered (or the run moved on).")
            return
        mode = "changes" if value.x == "changes" else form_mode(widget)
        if mode is None or not trigger_id:
            await self._refuse(key, user, "This question is answered in the thread, not in a form.")
            return
        context = FormContext(s=str(key), w=str(value.w), r=value.r, m=mode, t=clicked.ts if clicked else None)
        if not await self.io.open_view(trigger_id, build_modal(widget, context)):
            await self._refuse(key, user, "I couldn't open the form (Slack refused it). Click the button again.")

    async def form_target(
        self, context: FormContext, user: str
    ) -> tuple[ThreadRecord | None, dict[str, Any] | None, str]:
        """(record, pending widget, refusal) for a modal submission, checked before it is acknowledged."""
        key = ThreadKey.parse(context.s)
        record = await self._load(key) if key else None
        if record is None or key is None:
            return None, None, "This conversation is no longer available."
        verdict = self._may_act_here(key, record, user)
        if not verdict.allowed:
            return record, None, verdict.reason
        widget = self._pending(record, ButtonValue(s=context.s, w=context.w, r=context.r))
        if widget is None:
            return record, None, "This question has already been answered; close this form."
        return record, widget, ""

    async def on_form(self, context: FormContext, answer: Any, user: str) -> None:
        key = ThreadKey.parse(context.s)
        if key is None:
            return
        event = ThreadEvent(kind="form", thread=str(key), user=user, form=context, answer=answer)
        if self.handover is not None:
            await self.handover.push(event)
            return
        self.lanes.submit(key, lambda: self.run_event(event))

    async def _form_answer(self, key: ThreadKey, context: FormContext, answer: Any, user: str) -> None:
        record = await self.store.get(key)
        if record is None:
            await self._refuse(key, user, "This conversation is no longer available.")
            return
        if not await self._permitted(key, record, user):
            return
        widget = self._pending(record, ButtonValue(s=context.s, w=context.w, r=context.r))
        if widget is None:
            await self._refuse(key, user, "That question was already answered; your form was not used.")
            return
        if context.t:
            await self.io.update(key.channel, context.t, form_answered(widget, context.m, await self._name(user)))
        await self.submit_widget(record, context.w, answer, user)

    # ---- artifacts --------------------------------------------------------------

    async def _upload(
        self, key: ThreadKey, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> None:
        if not value.r:
            await self._refuse(key, user, "That file list is out of date; use the newest completion message.")
            return
        if not await self._started_here(record, value.r):  # a forged value naming another thread's run
            await self._refuse(key, user, "That file belongs to a run of another conversation.")
            return
        snapshot = await self.snapshot(record, value.r)
        recorded = snapshot.artifacts if snapshot else []
        path = value.f
        if path is None and value.i is not None and 0 <= value.i < len(recorded):
            path = recorded[value.i]
        if not path:
            await self._refuse(key, user, "That file list is out of date; use the newest completion message.")
            return
        binding = self.binding(record)
        package = binding.package(record.session.package_id) or binding.packages[0]
        try:
            run = await asyncio.to_thread(self.runs.get, value.r)
        except CrewError:
            run = None
        workspace = Path(run.workspace) if run is not None else binding.project  # a run's own worktree, if any
        try:
            data = await read_artifact(workspace, package.root, path, recorded)
        except ArtifactUnavailable as exc:
            await self._refuse(key, user, exc.message)
            return
        failure = await self.io.upload(key.channel, key.thread_ts, Path(path).name, data, path)
        if failure is not None:
            await self._refuse(key, user, upload_refusal(path, failure))

    async def _started_here(self, record: ThreadRecord, run_id: str) -> bool:
        """True when the run belongs to this thread's conversation (checked before reading anything of it)."""
        session = record.session
        if run_id in (session.run_id, session.last_run_id, record.status_run_id):
            return True

        def owner() -> str | None:
            try:
                return self.runs.get(run_id).session_id
            except CrewError:
                return None

        return await asyncio.to_thread(owner) == session.id

    # ---- delivery (git projects) ---------------------------------------------------

    async def _deliver_click(
        self, key: ThreadKey, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> None:
        session = record.session
        if not value.r or value.r not in (session.run_id, session.last_run_id, record.status_run_id):
            await self._refuse(key, user, "That run is no longer a run of this thread.")
            return
        message_ts = clicked.ts if clicked else None
        binding = self.binding(record)
        if binding.checkout is None:
            await self._refuse(key, user, "This channel's project is not a git repository; there is nothing to push.")
            return
        await self.deliveries.deliver(key, binding.checkout, binding.packages, value.r, user, completion_ts=message_ts)

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

    async def open_checkouts(self) -> None:
        """Find out which projects are git repositories (cloning `repo:` URLs), then tidy old worktrees.
        A failure is logged and retried when a run needs the repository."""
        for binding in self.bindings.values():
            if binding.checkout is not None:
                try:
                    await binding.checkout.open()
                except CrewError as exc:
                    log.warning("project repository unavailable", extra={"binding": binding.name, "code": exc.code})
        await self.tidy_worktrees()

    async def tidy_worktrees(self) -> int:
        """Remove worktrees of runs completed longer ago than the retention time (work stays on the branch)."""
        self._tidied_at = time.monotonic()
        records = await asyncio.to_thread(self.runs.list)
        busy = frozenset(r.run_id for r in records if self.engine.is_pumping(r.run_id))
        removed = 0
        for binding in self.bindings.values():
            if binding.checkout is not None:
                try:
                    removed += await binding.checkout.prune(records, keep=busy)
                except CrewError as exc:
                    log.warning("worktree clean-up skipped", extra={"code": exc.code})
        return removed

    def maybe_tidy(self) -> None:
        """At most once per TIDY_INTERVAL, clean up old worktrees in the background."""
        if time.monotonic() - self._tidied_at >= TIDY_INTERVAL:
            self._tidied_at = time.monotonic()
            self.lanes.spawn(self._tidy(), name="tidy-worktrees")

    async def _tidy(self) -> None:
        await self.tidy_worktrees()

    # ---- agent view -----------------------------------------------------------------

    async def suggested_prompts(self, channel: str) -> list[dict[str, str]]:
        """Prompts for the DM `channel`: its binding's agents and most used workflow items."""
        binding = self.bindings.get(self.config.binding_name(channel)) or self.bindings["default"]
        runs = await asyncio.wait_for(asyncio.to_thread(self.runs.list, binding.project), 10)
        return suggested_prompts(binding.packages, runs)

    # ---- restart ------------------------------------------------------------------

    async def resume_interrupted(self) -> int:
        """Runs left `running` by a previous process: resume them (or offer Resume). Returns how many."""
        interrupted = {r.run_id for r in await asyncio.to_thread(self.engine.interrupted_runs)}
        if not interrupted:
            return 0
        count = 0
        for record in await self.store.all():
            run_id = record.session.run_id
            if run_id not in interrupted:
                continue
            count += 1
            key = record.key
            self.lanes.submit(key, lambda key=key, run_id=run_id: self.resume_thread(key, run_id))
        return count

    async def resume_thread(self, key: ThreadKey, run_id: str) -> None:
        """Resume (or offer to resume) the thread's run that a stopped process left `running`."""
        record = await self.store.get(key)
        if record is None or record.session.run_id != run_id:
            return
        if not self.config.resume_on_start:
            await self.io.post(key.channel, key.thread_ts, blocks.resume_offer(key=str(key), run_id=run_id))
            return
        notice = blocks.notice("The bot restarted; resuming this run where it stopped.")
        await self.io.post(key.channel, key.thread_ts, notice)
        service, session = self.binding(record).service, record.session
        await self.perform(
            record, lambda emit: service.control(session, "resume", emit=emit), user=session.owner or "", gated=True
        )

