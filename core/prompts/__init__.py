"""Prompt composition: layered system messages, run anchors and the user-input shells (D§5)."""

from .composer import PromptComposer, effective_agent_id, render_persona, render_tool_policy
from ..base.wrappers import (
    STATE_CHANGE_CONFIRM_ID,
    confirms_state_change,
    parse_widget_submit,
    unwrap_user_input,
    widget_submit_text,
    wrap_user_input,
)

__all__ = [
    "STATE_CHANGE_CONFIRM_ID",
    "PromptComposer",
    "confirms_state_change",
    "effective_agent_id",
    "parse_widget_submit",
    "render_persona",
    "render_tool_policy",
    "unwrap_user_input",
    "widget_submit_text",
    "wrap_user_input",
]
