"""Clicks on the thread's messages: agent picker, menu, question, run controls, file and Commit & push buttons.

Every click is checked first (`ThreadWork._clicked`): the thread must exist, the user may act in it.
"""

from __future__ import annotations


from core.api.events import RunPhase

from ..render import blocks
from ..base.actions import ButtonValue, Clicked
from ..render.mrkdwn import escape
from ..base.thread import ThreadKey, ThreadRecord
from ..render.widgets import answered_text, answer_for
from .forms import FormWork
from .work import URGENT_COMMANDS


CONTROL_DONE = {"retry": "Retried", "resume": "Resumed"}


class ClickWork(FormWork):
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

    async def _upload(
        self, key: ThreadKey, record: ThreadRecord, value: ButtonValue, user: str, clicked: Clicked | None
    ) -> None:
        binding = self.binding(record)
        package = binding.package(record.session.package_id) or binding.packages[0]
        refusal = await self.uploads.upload(
            record, value, self.snapshot, project=binding.project, package_root=package.root
        )
        if refusal is not None:
            await self._refuse(key, user, refusal)

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
