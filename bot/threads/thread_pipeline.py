"""A thread event's work, once its lane runs it: the handler for the event's kind decides the session
call (text_events, click_events, form_events, upkeep), then `CallRunner` runs it and the thread's
renderer draws its outputs. Nothing here knows Slack's payloads or a handler's rules.
"""

from __future__ import annotations

from ..base.event import ThreadEvent
from ..base.thread import ThreadKey, ThreadRecord
from .click_events import ClickEvents
from .event_claim import Claims
from .form_events import FormEvents
from .session_calls import CallRunner, ThreadCall
from .text_events import TextEvents
from .upkeep import Upkeep


class ThreadPipeline:
    def __init__(
        self,
        *,
        text: TextEvents,
        clicks: ClickEvents,
        forms: FormEvents,
        upkeep: Upkeep,
        runner: CallRunner,
        claims: Claims,
    ) -> None:
        self.text = text
        self.clicks = clicks
        self.forms = forms
        self.upkeep = upkeep
        self.runner = runner
        self.claims = claims

    async def run_event(self, event: ThreadEvent) -> None:
        """One event, in the thread's order."""
        await self._run(await self._decide(event))

    async def run_now(self, event: ThreadEvent, live: ThreadRecord) -> None:
        """A pause/stop (typed or clicked) for the run pumping in the thread, outside the thread's order."""
        if event.kind == "text":
            call = await self.text.decide_now(live, event)
        elif await self.claims.take(event, final=True):
            call = await self.clicks.decide(event, live)
        else:
            call = None
        await self._run(call)

    async def resume(self, key: ThreadKey, run_id: str) -> None:
        """Resume (or offer to resume) the thread's run that a stopped process left `running`."""
        await self._run(await self.upkeep.resume_call(key, run_id))

    async def take_over(self, key: ThreadKey, run_id: str) -> None:
        """Resume the thread's run that another replica left `running` (it stopped or was cut off)."""
        await self._run(await self.upkeep.resume_call(key, run_id, taken_over=True))

    async def _decide(self, event: ThreadEvent) -> ThreadCall | None:
        if event.kind == "text":
            return await self.text.decide(event)
        if not await self.claims.take(event, final=True):
            # Already decided: as an urgent control by the replica pumping the run, or before a restart.
            return None
        if event.kind == "form":
            return await self.forms.decide(event)
        return await self.clicks.decide(event)

    async def _run(self, call: ThreadCall | None) -> None:
        if call is not None:
            await self.runner.run(call)
