"""The per-conversation session record. Plain data: a surface persists it between events."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from .outputs import MenuEntry

SessionMode = Literal["idle", "agent", "run", "chat"]


class PendingWidget(BaseModel):
    widget_id: str
    type: str
    payload: dict[str, Any]
    run_id: str | None = None

    @classmethod
    def from_payload(cls, widget: dict[str, Any], run_id: str | None) -> PendingWidget:
        """From a validated ui_ask_user payload; `run_id` None for agent/chat conversations."""
        return cls(
            widget_id=str(widget.get("widgetId") or ""),
            type=str(widget.get("type") or ""),
            payload=dict(widget),
            run_id=run_id,
        )


class Session(BaseModel):
    id: str  # surface-neutral key, e.g. "slack:T1:C1:1700000000.000100"
    package_id: str | None = None
    mode: SessionMode = "idle"
    agent_id: str | None = None
    run_id: str | None = None
    clarify: list[MenuEntry] = []  # pending ClarifyChoice candidates
    pending_widget: PendingWidget | None = None
    owner: str | None = None  # who started it (surface user id); authorization is the surface's job
    history: list[dict[str, Any]] = []  # short agent/chat history (OpenAI message dicts)
    last_run_id: str | None = None  # the run this conversation last worked on (kept after *dismiss, for *resume)
    retry_text: str | None = None  # an agent/chat message whose answer failed on the model; Retry sends it again
    model: str | None = None  # the model `*model` picked for this conversation; None: the configured default
    menu_open: bool = False  # *menu was shown during a run: the next number/trigger picks from it
