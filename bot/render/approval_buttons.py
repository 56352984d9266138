"""The MCP approval question in a thread: Approve / Deny, pressed only by the thread's owner or an admin.

The click is checked and settled like any widget button (ownership first, then the pending
widget); the buttons then become the outcome ("Approved by Alice"). Who pressed goes with the
answer into the run's audit log.
"""

from __future__ import annotations

from typing import Any

from ..base import actions as act
from ..base.actions import ButtonValue
from .message import BlockJSON
from .blocks import actions_block, button
from .mrkdwn import escape

APPROVAL_TYPE = "mcp_approval"  # core.tools.mcp.approval.APPROVAL_TYPE


def is_approval(widget: dict[str, Any]) -> bool:
    return widget.get("type") == APPROVAL_TYPE


def approval_controls(base: ButtonValue) -> list[BlockJSON]:
    approve = button("Approve", act.action_id(act.WIDGET, "approve_call"), base.model_copy(update={"c": True}), "primary")
    deny = button("Deny", act.action_id(act.WIDGET, "deny_call"), base.model_copy(update={"c": False}), "danger")
    return [actions_block([approve, deny])]


def approval_answer(value: ButtonValue, user: str) -> tuple[bool, Any]:
    if value.c is None:
        return False, None
    return True, {"approved": bool(value.c), "by": user}


def approval_outcome(value: ButtonValue, name: str) -> str:
    return f"{'Approved' if value.c else 'Denied'} by {escape(name)}."
