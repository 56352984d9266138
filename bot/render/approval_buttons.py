"""A tool call waiting for the run owner's approval, as a thread message: the request's title and
message (a command in a code block), and Approve, Deny and, when the tool offers it, "Allow `<first
words>` for this run". Only the thread's owner or an admin may press.

The click is checked and settled like any widget button (ownership first, then the pending
widget); the buttons then become the outcome ("Approved by Alice"). Who pressed goes with the
answer into the run's audit log.
"""

from __future__ import annotations

from typing import Any

from crewagent.core.api.sessions import answers

from ..base import actions as act
from ..base.actions import ButtonValue
from .message import BlockJSON
from .blocks import actions_block, button
from .mrkdwn import escape

APPROVAL_TYPES = ("tool_approval", "mcp_approval")  # core.run.tool_approvals.APPROVAL_TYPE; the older one too
ALLOW_FOR_RUN = "allow_run"  # ButtonValue.x of the "Allow … for this run" button
SHOWN_PREFIX_CHARS = 40


def is_approval(widget: dict[str, Any]) -> bool:
    return widget.get("type") in APPROVAL_TYPES


def _allowed_prefix(widget: dict[str, Any]) -> str | None:
    prefix = widget.get("allowForRun")
    return prefix if isinstance(prefix, str) and prefix.strip() else None


def _shown(prefix: str) -> str:
    return prefix if len(prefix) <= SHOWN_PREFIX_CHARS else prefix[: SHOWN_PREFIX_CHARS - 1] + "…"


def approval_controls(widget: dict[str, Any], base: ButtonValue) -> list[BlockJSON]:
    approve = button("Approve", act.action_id(act.WIDGET, "approve_call"), base.model_copy(update={"c": True}), "primary")
    deny = button("Deny", act.action_id(act.WIDGET, "deny_call"), base.model_copy(update={"c": False}), "danger")
    buttons = [approve, deny]
    prefix = _allowed_prefix(widget)
    if prefix is not None:
        allow = base.model_copy(update={"c": True, "x": ALLOW_FOR_RUN})
        buttons.append(button(f"Allow `{_shown(prefix)}` for this run", act.action_id(act.WIDGET, "allow_run"), allow))
    return [actions_block(buttons)]


def approval_answer(widget: dict[str, Any], value: ButtonValue, user: str) -> answers.ApprovalAnswer | None:
    """The decision a button stands for, made by `user`; None for a click that carries none."""
    if value.c is None or not user:
        return None
    decision: answers.Decision
    if value.x == ALLOW_FOR_RUN and value.c and _allowed_prefix(widget) is not None:
        decision = "allow_for_run"
    else:
        decision = "approve" if value.c else "deny"
    kind = "mcp_approval" if widget.get("type") == "mcp_approval" else "tool_approval"
    return answers.ApprovalAnswer(
        widget_id=str(value.w), type=kind, value=answers.ApprovalDecision(decision=decision, by=user)
    )


def approval_outcome(widget: dict[str, Any], value: ButtonValue, name: str) -> str:
    prefix = _allowed_prefix(widget)
    if value.c and value.x == ALLOW_FOR_RUN and prefix is not None:
        return f"Allowed `{escape(_shown(prefix))}` for this run by {escape(name)}."
    return f"{'Approved' if value.c else 'Denied'} by {escape(name)}."
