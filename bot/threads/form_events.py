"""Forms: a modal opened from a question's button, checked before Slack gets its ack, and its answer,
which becomes the session call that answers the question."""

from __future__ import annotations

from typing import Any

from crewagent.core.api.errors import CrewError
from crewagent.core.api.sessions import answers

from ..base.actions import ButtonValue, Clicked, FormContext
from ..base.event import ThreadEvent
from ..base.thread import ThreadKey, ThreadRecord
from ..render.modals import build_modal
from ..render.widgets import form_answered, form_mode
from ..outgoing import Edit, OpenModal
from ..slack_port import SlackPort
from .session_calls import AnswerWidget, ThreadCall
from .thread_notes import ThreadNotes
from .thread_state import ThreadState, pending_widget


class FormEvents:
    def __init__(self, *, state: ThreadState, notes: ThreadNotes, io: SlackPort) -> None:
        self.state = state
        self.notes = notes
        self.io = io

    async def open_form(
        self, key: ThreadKey, value: ButtonValue, user: str, trigger_id: str | None, clicked: Clicked | None
    ) -> None:
        """A question's form button: open its modal (at once; Slack's trigger expires in seconds)."""
        record = await self.state.load(key)
        if record is None:
            await self.notes.refuse(key, user, "This conversation is no longer available.")
            return
        if not await self.notes.permitted(key, record, user):
            return
        widget = pending_widget(record, value)
        if widget is None:
            await self.notes.refuse(key, user, "That question has already been answered (or the run moved on).")
            return
        mode = "changes" if value.x == "changes" else form_mode(widget)
        if mode is None or not trigger_id:
            await self.notes.refuse(key, user, "This question is answered in the thread, not in a form.")
            return
        context = FormContext(s=str(key), w=str(value.w), r=value.r, m=mode, t=clicked.ts if clicked else None)
        if not (await self.io.send(OpenModal(trigger_id, build_modal(widget, context)))).sent:
            await self.notes.refuse(key, user, "I couldn't open the form (Slack refused it). Click the button again.")

    async def check(
        self, context: FormContext, user: str
    ) -> tuple[ThreadRecord | None, dict[str, Any] | None, str]:
        """(record, pending widget, refusal) for a modal submission, checked before it is acknowledged."""
        key = ThreadKey.parse(context.s)
        record = await self.state.load(key) if key else None
        if record is None or key is None:
            return None, None, "This conversation is no longer available."
        verdict = self.notes.may_act_here(key, record, user)
        if not verdict.allowed:
            return record, None, verdict.reason
        widget = pending_widget(record, ButtonValue(s=context.s, w=context.w, r=context.r))
        if widget is None:
            return record, None, "This question has already been answered; close this form."
        return record, widget, ""

    async def decide(self, event: ThreadEvent) -> ThreadCall | None:
        """A submitted form, in the thread's order: the answer to the question it was opened for."""
        context, user, key = event.form, event.user, event.key
        if context is None:
            return None
        record = await self.state.store.get(key)
        if record is None:
            await self.notes.refuse(key, user, "This conversation is no longer available.")
            return None
        if not await self.notes.permitted(key, record, user):
            return None
        widget = pending_widget(record, ButtonValue(s=context.s, w=context.w, r=context.r))
        if widget is None:
            await self.notes.refuse(key, user, "That question was already answered; your form was not used.")
            return None
        try:
            answer = answers.checked_answer(widget, event.answer)
        except CrewError as exc:  # a submission no form of ours makes: forged, or from an older release
            await self.notes.refuse(key, user, exc.message)
            return None
        if context.t:
            answered = form_answered(widget, context.m, await self.notes.name(user))
            await self.io.send(Edit(key.channel, context.t, answered))
        return ThreadCall(record, AnswerWidget(answer), user)
