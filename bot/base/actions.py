"""What a button carries: enough to resolve a click without re-reading Slack.

Every interactive element's `value` is a small JSON object (well under Slack's 2000-char cap)
naming the thread's session, and the run / widget / menu generation it was drawn for, so a
click on an out-of-date message can be recognised as stale.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

PREFIX = "crew"
VALUE_LIMIT = 2000

# action_id patterns Bolt listens for; the suffix keeps ids unique inside one message.
AGENT = "agent"
MENU = "menu"
MENU_SELECT = "menu_select"
WIDGET = "widget"
FORM = "form"
CONTROL = "control"
ARTIFACT = "artifact"
DELIVER = "deliver"  # Commit & push a completed run's branch
NEXT = "next"  # start the workflow the package names next after a completed run (x: its workflow id)
FEEDBACK = "feedback"
FORM_CALLBACK = f"{PREFIX}:form"

ARTIFACT_SELECT = "artifact_select"

CLICKS = (AGENT, MENU, WIDGET, FORM, CONTROL, ARTIFACT, DELIVER, FEEDBACK, NEXT)  # every button kind Bolt listens for
SELECTS = (AGENT, MENU, WIDGET, ARTIFACT)  # kinds also offered as a select menu (`<kind>_select`)

FormMode = Literal["form", "multi_select", "changes", "feedback"]
ControlAction = Literal["pause", "stop", "resume", "retry", "status"]


def action_id(kind: str, suffix: str | int = 0) -> str:
    return f"{PREFIX}:{kind}:{suffix}"


def pattern(kind: str) -> re.Pattern[str]:
    """The regex a Bolt listener uses for every element of one kind."""
    return re.compile(rf"^{PREFIX}:{re.escape(kind)}:")


class ButtonValue(BaseModel):
    """Decoded `value` of any of our buttons (fields unused by a kind stay None)."""

    s: str  # thread key "team:channel:thread_ts"
    e: int | None = None  # choice generation (agent picker, menu, clarify)
    p: str | None = None  # package id
    a: str | None = None  # agent id
    n: int | None = None  # menu index (1-based)
    r: str | None = None  # run id
    w: str | None = None  # widget id
    i: int | None = None  # option / action index inside the widget
    c: bool | None = None  # confirmation answer
    x: str | None = None  # control action (a next-step button: the workflow id to start)
    f: str | None = None  # artifact path (project-relative)

    def encode(self) -> str:
        text = self.model_dump_json(exclude_none=True)
        if len(text) > VALUE_LIMIT:
            raise ValueError(f"button value too long ({len(text)} chars)")
        return text

    @classmethod
    def decode(cls, raw: str | None) -> ButtonValue | None:
        """None when the value is not ours or is malformed (a forged or truncated click)."""
        if not raw:
            return None
        try:
            return cls.model_validate(json.loads(raw))
        except (ValueError, ValidationError):
            return None


def fits(value: ButtonValue) -> bool:
    """True when the value can be sent as a button value."""
    return len(value.model_dump_json(exclude_none=True)) <= VALUE_LIMIT


@dataclass(frozen=True)
class Clicked:
    """The message a clicked element sat on (from the click payload), so it can be edited to show the outcome."""

    ts: str
    text: str = ""
    blocks: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_body(cls, body: dict[str, Any]) -> Clicked | None:
        message = body.get("message") or {}
        ts = message.get("ts") or (body.get("container") or {}).get("message_ts")
        if not ts:
            return None
        blocks = [b for b in message.get("blocks") or [] if isinstance(b, dict)]
        return cls(ts=str(ts), text=str(message.get("text") or ""), blocks=blocks)


class FormContext(BaseModel):
    """Carried in the modal's private_metadata, so the submission knows where it belongs."""

    s: str  # thread key
    w: str  # widget id
    r: str | None = None  # run id
    m: FormMode = "form"
    t: str | None = None  # ts of the message whose button opened the form, to show the outcome there
