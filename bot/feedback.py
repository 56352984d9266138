"""Slack's feedback buttons (👍 / 👎) under a completed run, and what a click does: a line in the run's
audit log, and a private thank-you to whoever clicked."""

from __future__ import annotations

import asyncio
import logging

from slack_sdk.models.blocks import ContextActionsBlock, FeedbackButtonObject, FeedbackButtonsElement, PlainTextObject

from core.errors import CrewError
from core.runs import RunManager

from . import actions as act
from .actions import ButtonValue
from .blocks import BlockJSON, serialise
from .slack_io import SlackIO
from .threads import ThreadKey

log = logging.getLogger(__name__)

POSITIVE = "good"
NEGATIVE = "bad"
THANKS = {
    POSITIVE: "Thanks! Your :+1: on this run was recorded.",
    NEGATIVE: "Thanks for saying so. Your :-1: on this run was recorded; reply in the thread to say what went wrong.",
}


def feedback_block(key: str, run_id: str) -> BlockJSON:
    """The 👍 / 👎 pair for the completion message; each value names the thread, the run and the verdict."""
    good = ButtonValue(s=key, r=run_id, x=POSITIVE).encode()
    bad = ButtonValue(s=key, r=run_id, x=NEGATIVE).encode()
    buttons = FeedbackButtonsElement(
        action_id=act.action_id(act.FEEDBACK),
        positive_button=FeedbackButtonObject(text=PlainTextObject(text="👍"), value=good, accessibility_label="Good run"),
        negative_button=FeedbackButtonObject(text=PlainTextObject(text="👎"), value=bad, accessibility_label="Bad run"),
    )
    return serialise(ContextActionsBlock(elements=[buttons]))


class FeedbackRecorder:
    def __init__(self, runs: RunManager, io: SlackIO) -> None:
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
            await self.io.ephemeral(key.channel, user, "That run no longer exists, so the feedback was not kept.", key.thread_ts)
            return
        await self.io.ephemeral(key.channel, user, THANKS[verdict], key.thread_ts)
