"""Slack's feedback buttons (👍 / 👎) for a completed run's message; each value names the thread, the run
and the verdict, so a click is recorded without reading Slack back."""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import ContextActionsBlock, FeedbackButtonObject, FeedbackButtonsElement, PlainTextObject

from ..base import actions as act
from ..base.actions import ButtonValue

POSITIVE = "good"
NEGATIVE = "bad"
THANKS = {
    POSITIVE: "Thanks! Your :+1: on this run was recorded.",
    NEGATIVE: "Thanks for saying so. Your :-1: on this run was recorded; reply in the thread to say what went wrong.",
}


def feedback_block(key: str, run_id: str) -> dict[str, Any]:
    """The 👍 / 👎 pair for the completion message; each value names the thread, the run and the verdict."""
    good = ButtonValue(s=key, r=run_id, x=POSITIVE).encode()
    bad = ButtonValue(s=key, r=run_id, x=NEGATIVE).encode()
    buttons = FeedbackButtonsElement(
        action_id=act.action_id(act.FEEDBACK),
        positive_button=FeedbackButtonObject(text=PlainTextObject(text="👍"), value=good, accessibility_label="Good run"),
        negative_button=FeedbackButtonObject(text=PlainTextObject(text="👎"), value=bad, accessibility_label="Bad run"),
    )
    return ContextActionsBlock(elements=[buttons]).to_dict()
