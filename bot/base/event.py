"""One user action on a thread, as data: the first step of a thread's work.

A reply, a click or a form answer becomes a `ThreadEvent` once, where Slack hands it over; typed
text is parsed for its `*command` there and nowhere else. The same value is what a replica queues in
Postgres for whichever replica drives the thread (a closure cannot cross processes; this can).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from crewagent.core.api.sessions import TypedText

from .actions import ButtonValue, Clicked, FormContext
from .thread import ThreadKey

_HANDOVER = re.compile(r"^[*/]handover\b\s*(?:<@([A-Z0-9]+)(?:\|[^>]*)?>)?\s*$", re.IGNORECASE)


def parse_handover(text: str) -> str | None:
    """`*handover @user` → the user id ("" when nobody is named); None for any other text."""
    match = _HANDOVER.match(text.strip())
    if match is None:
        return None
    return match.group(1) or ""


# How long a claim outlives the work it guards: Slack retries a delivery it got no answer for within
# minutes (at once, after a minute, after five), so an hour leaves a wide margin. A claim whose event
# still waits (in the embedded journal, or in the replicas' queue) or whose work is unsettled is kept
# whatever its age; nothing expires a claim by age alone.
REDELIVERY_WINDOW = 3600.0

class ThreadEvent(BaseModel):
    kind: Literal["text", "click", "form"]
    thread: str  # ThreadKey as text
    user: str
    dedupe: list[str] = Field(default_factory=list)  # claimed once, by whichever path handles it first
    # text
    text: str = ""
    message_ts: str = ""
    opening: bool = False
    command: str | None = None  # the session `*command` the text is, parsed once when the event is made
    handover: str | None = None  # `*handover @user`: the new owner ("" when nobody is named)
    # click
    click: str = ""  # action kind (bot.base.actions)
    value: ButtonValue | None = None
    clicked: Clicked | None = None  # the message the element sat on, to show the click's outcome there
    # form
    form: FormContext | None = None
    answer: Any = None

    @model_validator(mode="before")
    @classmethod
    def _parse_command(cls, data: Any) -> Any:
        """Typed text is parsed for its command here, once; later steps and other replicas read the fields."""
        if not isinstance(data, dict) or data.get("kind") != "text":
            return data
        raw = data.get("text")
        text = raw if isinstance(raw, str) else ""
        if "command" not in data:
            data = {**data, "command": TypedText.parse(text).command}
        if "handover" not in data:
            data = {**data, "handover": parse_handover(text)}
        return data

    @property
    def key(self) -> ThreadKey:
        key = ThreadKey.parse(self.thread)
        if key is None:
            raise ValueError(f"not a thread key: {self.thread!r}")
        return key

    @property
    def typed(self) -> TypedText:
        """The text with the command it was parsed as, for the session service (which does not parse it again)."""
        return TypedText(self.text, self.command)  # type: ignore[arg-type]
