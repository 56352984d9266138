"""Where Slack work enters the thread work: a reply, a click or a form answer becomes a `ThreadEvent`
(typed text is parsed for its `*command` there, once) and is pushed, with the control a pumping run
must get at once (a pause/stop, or the note that a reply waits), through the thread worker
(bot.threads.thread_worker), the same call on both stores. It keeps the event before Slack gets its
ack, and a delivery the inbox has already is acknowledged and not queued again.
What happens once the worker runs an event: bot.threads.thread_pipeline.
"""

from __future__ import annotations

import asyncio
import uuid
from functools import partial
from typing import Any

from ..access import AccessPolicy
from ..base import actions as act
from ..base.actions import ButtonValue, Clicked, FormContext
from ..base.event import ThreadEvent
from ..base.thread import ThreadKey, ThreadRecord
from ..completion.feedback import FeedbackRecorder
from ..config import BotConfig
from ..native.agent_view import suggested_prompts
from ..native.surface import AgentSurface
from ..outbox.courier import Courier
from ..replicas.callbacks import HandoverCallbacks
from .channel_binding import BindingRuntime
from .session_calls import URGENT_COMMANDS, PhaseWatcher
from .thread_notes import ThreadNotes
from .thread_pipeline import ThreadPipeline
from .thread_state import ThreadState
from .thread_worker import ThreadWorker

BUSY_NOTE = (
    "Still working on the run — your reply goes to it when it stops. Type `*pause` or `*stop` to interrupt it."
)


class ThreadIntake:
    """The entry points of the thread work: what the Bolt listeners, `/crew` and the replica hand-over call."""

    def __init__(
        self,
        *,
        config: BotConfig,
        state: ThreadState,
        worker: ThreadWorker,
        access: AccessPolicy,
        notes: ThreadNotes,
        pipeline: ThreadPipeline,
        feedback: FeedbackRecorder,
        surface: AgentSurface | None,
    ) -> None:
        """The lanes and, with replicas, the hand-over come with `state`; clicks and forms with `pipeline`."""
        self.config = config
        self.state = state
        self.lanes = state.lanes
        self.worker = worker  # the one way in, on both stores
        self.access = access
        self.notes = notes
        self.pipeline = pipeline
        self.clicks = pipeline.clicks
        self.forms = pipeline.forms
        self.feedback = feedback
        self.handover = state.handover  # replicas over Postgres (started and stopped by the serving process)
        self.surface = surface

    @property
    def bindings(self) -> dict[str, BindingRuntime]:
        return self.state.bindings

    @property
    def phase_watchers(self) -> list[PhaseWatcher]:
        """Told when a thread's run changes phase (e.g. the owner's Home tab)."""
        return self.pipeline.runner.phase_watchers

    def handover_callbacks(self) -> HandoverCallbacks:
        """What the replica hand-over calls: events it takes out of the shared queue come back here."""
        return HandoverCallbacks(
            kick=self.worker.kick,
            control_signal=self.control_signal,
            idle_run=self.state.idle_run,
            resume_thread=self.pipeline.take_over,
            stop_local_runs=self.state.stop_local_runs,
            take_outbox=partial(self.pipeline.upkeep.take_outbox, claims=self.pipeline.claims),
        )

    async def on_text(
        self, key: ThreadKey, user: str, text: str, message_ts: str, *, opening: bool, dedupe: list[str]
    ) -> None:
        """A thread reply, a mention or a DM, queued for the thread (before Slack gets its ack)."""
        event = ThreadEvent(
            kind="text", thread=str(key), user=user, text=text, message_ts=message_ts, opening=opening, dedupe=dedupe
        )
        command = event.command
        # Reaches the run pumping in the thread, if any, at once: it stops the run, or says the reply waits.
        signal = event if command in URGENT_COMMANDS or command is None else None
        await self.worker.push(event, signal)

    async def on_session_stopped(self, key: ThreadKey, user: str, *, dedupe: list[str]) -> None:
        """Slack's Stop on the thread's agent session: `*stop` from `user` (who must be allowed to stop it),
        and the session leaves `processing` at once, as Slack asks of every app."""
        if self.surface is not None:
            self.surface.sessions.stopped(key)
        await self.on_text(key, user, "*stop", "", opening=False, dedupe=dedupe)

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
        if kind == act.FORM:
            self.lanes.spawn(self.forms.open_form(key, value, user, trigger_id, clicked), name=f"form:{key}")
            return
        if kind == act.ARTIFACT:
            self.lanes.spawn(self.clicks.upload(key, value, user), name=f"upload:{key}")
            return
        if kind == act.FEEDBACK:
            self.lanes.spawn(self.feedback.record(key, value, user), name=f"feedback:{key}")
            return
        if not self.clicks.handles(kind):
            return
        # Claimed when decided: the urgent path and the queued one share it, and a replay after a restart
        # finds it taken.
        event = ThreadEvent(
            kind="click", thread=str(key), user=user, click=kind, value=value, clicked=clicked,
            dedupe=[f"click:{uuid.uuid4().hex}"],
        )
        urgent = kind == act.CONTROL and value.x in URGENT_COMMANDS
        await self.worker.push(event, event if urgent else None)

    async def form_check(
        self, context: FormContext, user: str
    ) -> tuple[ThreadRecord | None, dict[str, Any] | None, str]:
        """A modal submission, checked before it is acknowledged: (record, pending widget, refusal)."""
        return await self.forms.check(context, user)

    async def on_form(self, context: FormContext, answer: Any, user: str) -> None:
        key = ThreadKey.parse(context.s)
        if key is None:
            return
        # Claimed when decided: a replay after a restart finds it taken.
        event = ThreadEvent(
            kind="form", thread=str(key), user=user, form=context, answer=answer, dedupe=[f"form:{uuid.uuid4().hex}"]
        )
        await self.worker.push(event)

    def control_signal(self, event: ThreadEvent) -> None:
        """A pause/stop sent to any replica: acted on here if this replica pumps the thread's run."""
        live = self._pumping(event.key)
        if live is None:
            return
        if event.kind == "click" or event.command in URGENT_COMMANDS:
            self.lanes.spawn(self.pipeline.run_now(event, live), name=f"urgent:{event.key}")
        elif event.kind == "text" and event.command is None and self.access.may_act(event.user, live.session).allowed:
            self.lanes.spawn(self.notes.refuse(event.key, event.user, BUSY_NOTE), name=f"busy:{event.key}")

    async def suggested_prompts(self, channel: str) -> list[dict[str, str]]:
        """Prompts for the DM `channel`: its binding's agents and most used workflow items."""
        binding = self.bindings.get(self.config.binding_name(channel)) or self.bindings["default"]
        runs = await asyncio.wait_for(asyncio.to_thread(self.state.runs.list, binding.project), 10)
        return suggested_prompts(binding.packages, runs)

    async def open_checkouts(self) -> None:
        await self.pipeline.upkeep.open_checkouts()

    async def settle_streams(self, outbox: Courier) -> int:
        """Streamed replies a previous process left open or unshown: settled before any other work."""
        return await self.pipeline.upkeep.settle_streams(outbox, self.pipeline.claims)

    async def resume_interrupted(self) -> int:
        """Runs left `running` by a previous process: resume them (or offer Resume). Returns how many."""
        return await self.pipeline.upkeep.resume_interrupted(self.pipeline.resume)

    async def replay_pending(self) -> int:
        """Events a previous process acknowledged but did not finish (embedded): queued again, oldest
        first, behind the resumed runs. Returns how many events."""
        return await self.worker.replay()

    def _pumping(self, key: ThreadKey) -> ThreadRecord | None:
        """The thread's live record, if its run is pumping here."""
        live = self.state.live(key)
        return live if live is not None and self.state.pumping(live) else None
