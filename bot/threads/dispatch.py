"""Where Slack work enters: a reply, a click or a form is made a thread event and queued on the thread's lane
(or, with replicas, in Postgres for whichever replica drives the thread), before Slack gets its ack.

`*pause` / `*stop` skip the lane so they reach a pumping run at once. The work itself: bot.threads.events
(typed text), .clicks, .forms, on top of .work (`perform`); upkeep (checkouts, clean-up, resume after a
restart) in .upkeep.
"""

from __future__ import annotations

import asyncio
import uuid
from functools import partial
from typing import Any

from ..base import actions as act
from ..render import blocks
from ..base.actions import ButtonValue, Clicked, FormContext
from ..native.agent_view import suggested_prompts
from ..base.event import ThreadEvent
from ..base.thread import ThreadKey
from ..replicas.callbacks import HandoverCallbacks
from .events import BUSY_NOTE, EventWork
from .work import URGENT_COMMANDS


class Dispatcher(EventWork):
    """The thread work of this bot, and its entry points (what the Bolt listeners and the Home tab call)."""

    def handover_callbacks(self) -> HandoverCallbacks:
        """What the replica hand-over calls: events it takes out of the shared queue come back here."""
        return HandoverCallbacks(
            run_event=self.run_event,
            control_signal=self.control_signal,
            idle_run=self.idle_run,
            resume_thread=self.resume_thread,
            stop_local_runs=self.stop_local_runs,
        )

    async def on_text(
        self, key: ThreadKey, user: str, text: str, message_ts: str, *, opening: bool, dedupe: list[str]
    ) -> None:
        """A thread reply, a mention or a DM, queued for the thread (before Slack gets its ack)."""
        event = ThreadEvent(
            kind="text", thread=str(key), user=user, text=text, message_ts=message_ts, opening=opening, dedupe=dedupe
        )
        command = event.command
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
        self.lanes.submit(key, partial(self.run_event, event))

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
        self.lanes.submit(key, partial(self.run_event, event))

    async def on_form(self, context: FormContext, answer: Any, user: str) -> None:
        key = ThreadKey.parse(context.s)
        if key is None:
            return
        event = ThreadEvent(kind="form", thread=str(key), user=user, form=context, answer=answer)
        if self.handover is not None:
            await self.handover.push(event)
            return
        self.lanes.submit(key, partial(self.run_event, event))

    async def open_checkouts(self) -> None:
        await self.upkeep.open_checkouts()

    async def tidy_worktrees(self) -> int:
        return await self.upkeep.tidy_worktrees()

    async def suggested_prompts(self, channel: str) -> list[dict[str, str]]:
        """Prompts for the DM `channel`: its binding's agents and most used workflow items."""
        binding = self.bindings.get(self.config.binding_name(channel)) or self.bindings["default"]
        runs = await asyncio.wait_for(asyncio.to_thread(self.runs.list, binding.project), 10)
        return suggested_prompts(binding.packages, runs)

    async def resume_interrupted(self) -> int:
        """Runs left `running` by a previous process: resume them (or offer Resume). Returns how many."""
        return await self.upkeep.resume_interrupted(self.store, self.resume_thread)

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
