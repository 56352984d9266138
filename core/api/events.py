"""Events: what the engine reports while a run moves, and their short progress texts."""

from __future__ import annotations

from ..base.events import (
    ArtifactWritten, AssistantText, AssistantTextDelta, CommandProgress, EngineEvent, LLMRetrying, NodeStarted,
    PhaseChanged, RunPhase, StateUpdated, SubworkflowReturned, SubworkflowStarted, ToolExecuted,
    progress_text, retry_note,
)

__all__ = [
    "ArtifactWritten", "AssistantText", "AssistantTextDelta", "CommandProgress", "EngineEvent", "LLMRetrying",
    "NodeStarted", "PhaseChanged", "RunPhase", "StateUpdated", "SubworkflowReturned",
    "SubworkflowStarted", "ToolExecuted", "progress_text", "retry_note",
]
