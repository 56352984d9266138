"""The completion message's git part (a Commit & push button, or the pushed branch and its PR link)
and the message that reports a delivery. Paths and remote URLs never appear; branch names do.

Built straight on slack_sdk's models (not bot.render.blocks), so the completion builder can call it."""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ContextBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from crewagent.core.api.checkout import Delivery
from crewagent.core.api.runs import RunSnapshot

from ..base import actions as act
from ..base.actions import ButtonValue
from .mrkdwn import escape

DELIVER_LABEL = "Commit & push"
PUSH_AGAIN_LABEL = "Push new changes"
DELIVERING = "Committing the run's changes and pushing its branch…"


def _section(text: str) -> dict[str, Any]:
    return SectionBlock(text=MarkdownTextObject(text=text)).to_dict()


def _link(pull_request_url: str | None) -> str:
    """An opened pull request's page (`…/pull/N`), or the forge's page for opening one."""
    if not pull_request_url:
        return ""
    label = "View its pull request" if "/pull/" in pull_request_url else "Open a pull request"
    return f" <{escape(pull_request_url)}|{label}>"


def delivery_blocks(snapshot: RunSnapshot, *, key: str) -> list[dict[str, Any]]:
    """Blocks the completion message ends with for a run that works on a git branch (none otherwise)."""
    if not snapshot.branch:
        return []
    branch = escape(snapshot.branch)
    value = ButtonValue(s=key, r=snapshot.run_id, x="deliver").encode()
    if snapshot.pushed:  # later changes (post-completion chat) can be pushed again
        text = f":rocket: Branch `{branch}` is on the team repository.{_link(snapshot.pull_request_url)}"
        label = PlainTextObject(text=PUSH_AGAIN_LABEL)
        again = ButtonElement(text=label, action_id=act.action_id(act.DELIVER), value=value)
        return [_section(text), ActionsBlock(elements=[again]).to_dict()]
    push = ButtonElement(
        text=PlainTextObject(text=DELIVER_LABEL), action_id=act.action_id(act.DELIVER), value=value, style="primary"
    )
    return [
        _section(f"The results are on branch `{branch}`, not pushed yet."),
        ActionsBlock(elements=[push]).to_dict(),
    ]


def delivery_message(
    result: Delivery, *, pull_request_refusal: str | None = None
) -> tuple[str, list[dict[str, Any]]]:
    """(fallback text, blocks) saying what a Commit & push, or an automatic push, did; with `forge:`,
    what the forge said when it opened no pull request."""
    if result.pushed:
        commit = f" (commit `{result.commit[:8]}`)" if result.commit else ""
        text = f":rocket: Pushed branch `{escape(result.branch)}`{commit} to the team repository."
        out = [_section(text + _link(result.pull_request_url))]
        if pull_request_refusal:
            out.append(_section(f":warning: {escape(pull_request_refusal)}"))
        return f"Pushed {result.branch}", out
    icon = ":information_source:" if result.outcome in ("nothing", "committed") else ":warning:"
    return result.message, [_section(f"{icon} {escape(result.message)}")]


def delivering_note() -> tuple[str, list[dict[str, Any]]]:
    return DELIVERING, [ContextBlock(elements=[MarkdownTextObject(text=DELIVERING)]).to_dict()]
