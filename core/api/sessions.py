"""Sessions: the conversation service, the session it moves, and the outputs it sends to a surface."""

from __future__ import annotations

from ..session.outputs import (
    AgentCard, Clarify, Dismissed, ErrorOutput, MenuEntry, Notice, Output, Reply, ReplyDelta,
    RunProgress, RunStarted, RunStatus, ShowAgents, ShowMenu, WidgetRequest,
)
from ..session.commands import TypedText
from ..session.model import Session
from ..session.service import SessionService

__all__ = [
    "AgentCard", "Clarify", "Dismissed", "ErrorOutput", "MenuEntry", "Notice", "Output", "Reply",
    "ReplyDelta", "RunProgress", "RunStarted", "RunStatus", "Session", "SessionService", "ShowAgents",
    "ShowMenu", "TypedText", "WidgetRequest",
]
