"""The post-completion confirmation gate and access to the run state for state-changing tools."""

from __future__ import annotations

from typing import Any

from ..base.errors import CrewError
from .mounts import SandboxViolation
from ..document.state import STATE_ALIAS, Build, StateWrite, commit_state, is_complete
from .base import ToolContext

CONFIRM_WIDGET_ID = "workflow_state_change_confirm"


def confirmation_gate(ctx: ToolContext):
    """A gate for commit_state: once the run is complete, each state change spends one user Confirm."""

    def gate(current: dict[str, Any] | None) -> None:
        if ctx.mode != "run" or current is None or ctx.graph is None or not is_complete(current, ctx.graph):
            return
        if ctx.confirmation.consume():
            return
        raise CrewError(
            "STATE_CHANGE_REQUIRES_CONFIRMATION",
            "The workflow is complete, so changing the run state needs the user's OK first. "
            f'Call ui_ask_user with type "confirmation", widgetId "{CONFIRM_WIDGET_ID}" and a message that says '
            "what will change (and whether it re-opens the workflow), then stop and wait for the answer.",
            {"widgetId": CONFIRM_WIDGET_ID},
        )

    return gate


def change_state(ctx: ToolContext, build: Build, *, if_match: str | None = None, rewind: bool = False) -> StateWrite:
    """Run one state change through the gate and the validator of core.document.state."""
    if ctx.mounts.state is None or ctx.mode != "run":
        raise SandboxViolation(
            f"{STATE_ALIAS}: there is no run state here.", mount="@state", path=STATE_ALIAS, reason="no run state here"
        )
    if ctx.graph is None:
        raise CrewError("E_INTERNAL", "The run's workflow graph is not available, so its state cannot change.")
    return commit_state(
        ctx.mounts.state, ctx.graph, build, if_match=if_match, gate=confirmation_gate(ctx), rewind=rewind
    )
