"""Forms: a modal opened from a question's button, checked before Slack gets its ack, and its answer applied.
"""

from __future__ import annotations

from typing import Any

from ..base.actions import ButtonValue, Clicked, FormContext
from ..render.modals import build_modal
from ..base.thread import ThreadKey, ThreadRecord
from ..render.widgets import form_answered, form_mode
from .work import ThreadWork


class FormWork(ThreadWork):
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
