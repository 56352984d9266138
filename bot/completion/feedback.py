"""What a click on a completed run's feedback buttons does: a line in the run's audit log, and a
private thank-you to whoever clicked."""

from __future__ import annotations

import asyncio
import logging

from crewagent.core.api.errors import CrewError
from crewagent.core.api.runs import RunManager

from ..base.actions import ButtonValue
from ..render.feedback_buttons import THANKS
from ..outgoing import Ephemeral
from ..slack_port import SlackPort
from ..base.thread import ThreadKey

log = logging.getLogger(__name__)

class FeedbackRecorder:
    def __init__(self, runs: RunManager, io: SlackPort) -> None:
        self.runs, self.io = runs, io

    async def record(self, key: ThreadKey, value: ButtonValue, user: str) -> None:
        verdict = value.x if value.x in THANKS else None
        if verdict is None or not value.r:
            return
        run_id = value.r

        def write() -> bool:
            try:
                record = self.runs.get(run_id)
            except CrewError:
                return False
            self.runs.store.audit(record, "run.feedback", rating=verdict, user=user, thread=str(key))
            return True

        if not await asyncio.wait_for(asyncio.to_thread(write), 10):
            gone = "That run no longer exists, so the feedback was not kept."
            await self.io.send(Ephemeral(key.channel, user, gone, key.thread_ts))
            return
        await self.io.send(Ephemeral(key.channel, user, THANKS[verdict], key.thread_ts))
