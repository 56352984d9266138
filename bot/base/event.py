"""One user action on a thread, as data: what a replica queues in Postgres for whichever replica drives
the thread (a closure cannot cross processes; this can)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from core.api.sessions import parse_global_command

from .actions import ButtonValue, Clicked, FormContext
from .thread import ThreadKey


class ThreadEvent(BaseModel):
    kind: Literal["text", "click", "form"]
    thread: str  # ThreadKey as text
    user: str
    dedupe: list[str] = Field(default_factory=list)  # claimed once, by whichever path handles it first
    # text
    text: str = ""
    message_ts: str = ""
    opening: bool = False
    command: str | None = None  # the `*command` the text is, parsed once when the event is made
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
        """Typed text is parsed for a global command here, once; later steps and other replicas read `command`."""
        if isinstance(data, dict) and data.get("kind") == "text" and "command" not in data:
            text = data.get("text")
            return {**data, "command": parse_global_command(text) if isinstance(text, str) and text else None}
        return data

    @property
    def key(self) -> ThreadKey:
        key = ThreadKey.parse(self.thread)
        if key is None:
            raise ValueError(f"not a thread key: {self.thread!r}")
        return key
