"""Clicks on a thread's messages: agent picker, menu, question, run controls, file and Commit & push buttons.

Every click is checked first: the thread must exist and the user must be allowed to act in it. A click
then becomes a session call, or is done here (a file post, a push) and needs none.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from crewagent.core.api.events import RunPhase
from crewagent.core.api.sessions import TypedText

from ..base import actions as act
from ..base.actions import ButtonValue, Clicked
from ..base.event import ThreadEvent
from ..base.thread import ThreadKey, ThreadRecord
from ..completion.push import Deliveries
from ..completion.uploads import Uploads
from ..render import blocks
from ..render.mrkdwn import escape
from ..render.widgets import answer_for, answered_text
from .session_calls import URGENT_COMMANDS, AnswerWidget, PickAgent, RunControl, SayText, StartNext, ThreadCall
from .thread_notes import ThreadNotes
from .thread_state import ThreadState, pending_widget

CONTROL_DONE = {"retry": "Retried", "resume": "Resumed"}

Click = Callable[[ThreadRecord, ButtonValue, str, Clicked | None], Awaitable[ThreadCall | None]]


class ClickEvents:
    def __init__(
        self, *, state: ThreadState, notes: ThreadNotes, uploads: Uploads, deliveries: Deliveries
    ) -> None:
        self.state = state
        self.notes = notes
        self.uploads = uploads  # file buttons
        self.deliveries = deliveries  # Commit & push
        self._kinds: dict[str, Click] = {
            act.AGENT: self._agent,
            act.MENU: self._menu,
            act.WIDGET: self._widget,
            act.CONTROL: self._control,
            act.DELIVER: self._deliver,
            act.NEXT: self._next,
        }

    def handles(self, kind: str) -> bool:
        """A click of this kind is a thread event, handled here in the thread's order."""
        return kind in self._kinds

    async def decide(self, event: ThreadEvent, live: ThreadRecord | None = None) -> ThreadCall | None:
        """The session call a click is (None: refused, or done here); `live` is the record of a pumping run."""
        handle = self._kinds.get(event.click)
        if handle is None or event.value is None:
            return None
        record = await self._checked(event.key, event.user, live)
        return await handle(record, event.value, event.user, event.clicked) if record else None

    async def upload(self, key: ThreadKey, value: ButtonValue, user: str) -> None:
        """A file button: post the run's file in the thread (no session call, no wait for the thread's order)."""
        record = await self._checked(key, user)
        if record is None:
            return
        binding = self.state.binding(record)
        package = binding.package(record.session.package_id) or binding.packages[0]
        refusal = await self.uploads.upload(
            record, value, self.state.snapshot, project=binding.project, package_root=package.root
        )
        if refusal is not None:
            await self.notes.refuse(key, user, refusal)

    async def _checked(self, key: ThreadKey, user: str, live: ThreadRecord | None = None) -> ThreadRecord | None:
        record = live or await self.state.load(key)
        if record is None:
            await self.notes.refuse(key, user, "This conversation is no longer available. Mention me to start a new one.")
            return None
        return record if await self.notes.permitted(key, record, user) else None

    async def _agent(
        self, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> ThreadCall | None:
        if value.e != record.epoch or not value.a:
            await self.notes.refuse(record.key, user, "That agent list is out of date; use the newest message in this thread.")
            return None
        return ThreadCall(record, PickAgent(value.a), user)

    async def _menu(
        self, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> ThreadCall | None:
        in_run = record.session.mode == "run" and not record.session.menu_open
        if value.e != record.epoch or value.n is None or in_run:
            await self.notes.refuse(record.key, user, "That menu is out of date; type `*menu` for the current one.")
            return None
        return ThreadCall(record, SayText(TypedText(str(value.n))), user)

    async def _widget(
        self, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> ThreadCall | None:
        """An answer button of the open question (an approval's Approve / Deny too)."""
        key = record.key
        widget = pending_widget(record, value)
        if widget is None:
            await self.notes.refuse(key, user, "That question has already been answered (or the run moved on).")
            return None
        answer = answer_for(widget, value, user)
        if answer is None:
            await self.notes.refuse(key, user, "That answer is not one of the options any more.")
            return None
        await self.notes.settle(key, clicked, answered_text(widget, value, await self.notes.name(user)))
        return ThreadCall(record, AnswerWidget(answer), user)

    async def _control(
        self, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> ThreadCall | None:
        key, action, session = record.key, value.x or "", record.session
        if action == "retry" and not value.r:
            return await self._retry_chat(record, user, clicked)
        if not value.r or value.r != session.run_id:
            await self.notes.refuse(key, user, "That run is no longer the active run of this thread.")
            return None
        snapshot = await self.state.snapshot(record, value.r)
        allowed = set(blocks.controls_for(snapshot)) if snapshot else set()
        if snapshot and snapshot.phase == RunPhase.RUNNING and not self.state.pumping(record):
            allowed.add("resume")  # left running by a restart
        allowed.add("status")
        if action not in allowed:
            phase = blocks.phase_label(snapshot) if snapshot else "gone"
            await self.notes.refuse(
                key, user, f"That button is out of date: the run is {phase} now, so there is nothing to {action}."
            )
            return None
        if action in URGENT_COMMANDS and self.state.pumping(record):
            return ThreadCall(record, RunControl(action), user, now=True)
        if action in CONTROL_DONE:
            await self.notes.settle(key, clicked, f"{CONTROL_DONE[action]} by {escape(await self.notes.name(user))}.")
        return ThreadCall(record, RunControl(action), user)

    async def _retry_chat(self, record: ThreadRecord, user: str, clicked: Clicked | None) -> ThreadCall | None:
        """Retry of a failed agent or chat answer (no run involved): ask the model again."""
        session = record.session
        if session.retry_text is None or session.mode not in ("agent", "chat"):
            await self.notes.refuse(
                record.key, user, "That Retry button is out of date: there is no failed answer to retry now."
            )
            return None
        await self.notes.settle(record.key, clicked, f"Retried by {escape(await self.notes.name(user))}.")
        return ThreadCall(record, RunControl("retry"), user)

    async def _deliver(
        self, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> ThreadCall | None:
        """Commit & push a completed run's branch (no session call)."""
        key, session = record.key, record.session
        if not value.r or value.r not in (session.run_id, session.last_run_id, record.status_run_id):
            await self.notes.refuse(key, user, "That run is no longer a run of this thread.")
            return None
        binding = self.state.binding(record)
        if binding.checkout is None:
            await self.notes.refuse(
                key, user, "This channel's project is not a git repository; there is nothing to push."
            )
            return None
        message_ts = clicked.ts if clicked else None
        await self.deliveries.deliver(key, binding.checkout, binding.packages, value.r, user, completion_ts=message_ts)
        return None

    async def _next(
        self, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> ThreadCall | None:
        """A next-step button under a completed run: only for the thread's latest run, and only a step
        its package still offers (an older message's button, or a made-up one, is refused)."""
        key, session = record.key, record.session
        latest = session.run_id or session.last_run_id
        if not value.r or not value.x or value.r != latest:
            await self.notes.refuse(key, user, "That next step is out of date: a later run has started in this thread.")
            return None
        snapshot = await self.state.snapshot(record, value.r)
        offered = {step.workflow_id for step in snapshot.next_steps} if snapshot else set()
        if snapshot is None or snapshot.phase != RunPhase.COMPLETED or value.x not in offered:
            await self.notes.refuse(key, user, "That next step is not offered after this run; use the newest buttons.")
            return None
        return ThreadCall(record, StartNext(value.r, value.x), user)
