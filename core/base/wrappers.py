"""The user-side shells the runtime wraps around what a person typed or submitted."""

from __future__ import annotations

import json
from typing import Any

USER_INPUT = "USER_INPUT"
WIDGET_SUBMIT = "WIDGET_SUBMIT"
STATE_CHANGE_CONFIRM_ID = "workflow_state_change_confirm"


def wrap_user_input(text: str, for_node_id: str | None = None) -> str:
    """The user's words verbatim under a USER_INPUT header; `forNodeId` only while a step is active."""
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


def widget_submit_text(widget_id: str, widget_type: str, value: Any) -> str:
    """What a surface sends as user input when a widget is answered."""
    payload = {"widgetId": widget_id, "type": widget_type, "value": value}
    return f"{WIDGET_SUBMIT}\n{json.dumps(payload, ensure_ascii=False)}"


def parse_widget_submit(text: str | None) -> dict[str, Any] | None:
    """{widgetId, type, value} from a WIDGET_SUBMIT message, wrapped in USER_INPUT or not."""
    if not text:
        return None
    raw = unwrap_user_input(text).strip()
    if not raw.startswith(WIDGET_SUBMIT):
        return None
    try:
        payload = json.loads(raw[len(WIDGET_SUBMIT) :].strip())
    except ValueError:
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("widgetId"), str):
        return None
    return payload


def confirms_state_change(text: str | None) -> bool:
    """True iff the input is the user's "yes" to the post-completion state-change confirmation."""
    payload = parse_widget_submit(text)
    if payload is None or payload.get("widgetId") != STATE_CHANGE_CONFIRM_ID:
        return False
    value = payload.get("value")
    return isinstance(value, dict) and value.get("confirmed") is True
