"""The user-side shells the runtime wraps around what a person typed or submitted.

This is the one place a typed answer (core.base.answers) becomes the text the model reads: the
spec's `WIDGET_SUBMIT` message, `{"widgetId", "type", "value"}` as JSON under its header. Nothing
in core reads that text back; a run's log keeps it only as the model's conversation.
"""

from __future__ import annotations

import json

from .answers import FormAnswer, UserInput, wire_value

USER_INPUT = "USER_INPUT"
WIDGET_SUBMIT = "WIDGET_SUBMIT"


def wrap_user_input(given: UserInput, for_node_id: str | None = None) -> str:
    """The user's words verbatim (or their answer as WIDGET_SUBMIT) under a USER_INPUT header;
    `forNodeId` only while a step is active."""
    text = given if isinstance(given, str) else widget_submit_text(given)
    head = USER_INPUT if not for_node_id else f"{USER_INPUT}\n- forNodeId: {for_node_id}"
    return f"{head}\n{text}"


def unwrap_user_input(content: str) -> str:
    """The raw text inside a USER_INPUT shell (or the content itself if it has none)."""
    if not content.startswith(USER_INPUT):
        return content
    lines = content.split("\n")[1:]
    if lines and lines[0].startswith("- forNodeId:"):
        lines = lines[1:]
    return "\n".join(lines)


def widget_submit_text(answer: FormAnswer) -> str:
    """The answer as the model reads it: `WIDGET_SUBMIT` and `{"widgetId", "type", "value"}`."""
    payload = {"widgetId": answer.widget_id, "type": answer.type, "value": wire_value(answer)}
    return f"{WIDGET_SUBMIT}\n{json.dumps(payload, ensure_ascii=False)}"
