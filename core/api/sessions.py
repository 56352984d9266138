"""Sessions: the conversation service, its outputs to a surface, and command routing."""

from __future__ import annotations

from ..session.outputs import (
    AgentCard, Clarify, Dismissed, ErrorOutput, MenuEntry, Notice, Output, Reply, ReplyDelta,
    RunProgress, RunStarted, RunStatus, ShowAgents, ShowMenu, WidgetRequest,
)
from ..session.router import display_trigger, parse_global_command, resolve, visible_items
from ..session.commands import TypedText
from ..session.model import Session
from ..session.service import CHAT_WORDS, SessionService

__all__ = [
    "AgentCard", "CHAT_WORDS", "Clarify", "Dismissed", "ErrorOutput", "MenuEntry", "Notice", "Output",
    "Reply", "ReplyDelta", "RunProgress", "RunStarted", "RunStatus", "Session", "SessionService",
    "ShowAgents", "ShowMenu", "TypedText", "WidgetRequest", "display_trigger", "parse_global_command", "resolve",
    "visible_items",
]
