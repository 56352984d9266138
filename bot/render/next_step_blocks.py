"""The next step of a cycle, as the completion message offers it: one button per workflow the package
names after the completed one (Dev Story after Create Story, Code Review after Dev Story, and back to
Dev Story after a review), and the cycle so far as one line under a run's plan.

Built straight on slack_sdk's models (not bot.render.blocks), so the completion builder can call it."""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import ActionsBlock, ButtonElement, ContextBlock, MarkdownTextObject, PlainTextObject

from crewagent.core.api.events import RunPhase
from crewagent.core.api.runs import RunSnapshot

from ..base import actions as act
from ..base.actions import ButtonValue
from .mrkdwn import escape

LABEL_LIMIT = 75  # Slack's limit for a button's text


def button_label(label: str, agent_name: str, back: bool) -> str:
    text = f"{'Back to ' if back else ''}{label} · {agent_name}"
    return text if len(text) <= LABEL_LIMIT else text[: LABEL_LIMIT - 1] + "…"


def next_step_blocks(snapshot: RunSnapshot, *, key: str) -> list[dict[str, Any]]:
    """Blocks offering the next workflow(s) after a completed run; none when the package names none."""
    if snapshot.phase is not RunPhase.COMPLETED or not snapshot.next_steps:
        return []
    buttons = []
    for index, step in enumerate(snapshot.next_steps):
        value = ButtonValue(s=key, r=snapshot.run_id, x=step.workflow_id).encode()
        buttons.append(ButtonElement(
            text=PlainTextObject(text=button_label(step.label, step.agent_name, step.back)),
            action_id=act.action_id(act.NEXT, index), value=value,
            style="primary" if index == 0 and not step.back else None,
        ))
    note = "*Next step* — it runs in this thread, on the same branch, and can read this run's files:"
    text = ContextBlock(elements=[MarkdownTextObject(text=note)])
    return [text.to_dict(), ActionsBlock(elements=buttons).to_dict()]


def cycle_line(snapshot: RunSnapshot) -> str | None:
    """`Cycle so far: Create Story ✓ → Dev Story ✓ → *Code Review*` for a run that continues others."""
    if not snapshot.cycle:
        return None
    done = " → ".join(f"{escape(name)} ✓" for name in snapshot.cycle)
    current = escape(snapshot.workflow_name)
    return f"Cycle so far: {done} → *{current}*{' ✓' if snapshot.phase is RunPhase.COMPLETED else ''}"
