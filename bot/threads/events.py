"""One thread event (typed text, a click, a form answer) applied in the thread's order; typed text is here.

The command in typed text was parsed once, when the event was made (`ThreadEvent.command`).
"""

from __future__ import annotations


from ..base import actions as act
from ..render import blocks
from ..access import Verdict, parse_handover
from ..base.event import ThreadEvent
from ..base.thread import ThreadKey, ThreadRecord
from .clicks import ClickWork
from .work import URGENT_COMMANDS


READ_ONLY_COMMANDS = frozenset({"status", "help"})  # what a non-owner may type in someone else's thread
BUSY_NOTE = (
    "Still working on the run — your reply goes to it when it stops. Type `*pause` or `*stop` to interrupt it."
)


class EventWork(ClickWork):
    async def run_event(self, event: ThreadEvent) -> None:
        """The thread's work for one event, in the thread's order."""
        key = event.key
        if event.kind == "text":
            await self._text(
                key, event.user, event.text, event.message_ts,
                opening=event.opening, dedupe=event.dedupe, command=event.command,
            )
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
            command = event.command
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

    async def _text(
        self,
        key: ThreadKey,
        user: str,
        text: str,
        message_ts: str,
        *,
        opening: bool,
        dedupe: list[str],
        command: str | None,
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
        """Someone else's thread: they may ask for the status or the help, or chat with the agent, nothing more."""
        service, session = self.binding(record).service, record.session
        if command in READ_ONLY_COMMANDS:
            await self.perform(
                record, lambda emit: service.control(session, command, emit=emit), user=user, gated=False,
                fresh_status=command == "status",
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
