"""Events: what the engine reports while a run moves.

The event types are one vocabulary, reached through one namespace: `engine_events.EngineEvent` (any of
them), `engine_events.NodeStarted`,
`engine_events.LLMRetrying`, and the short texts surfaces show for them (`engine_events.progress_text`,
`engine_events.retry_note`).
"""

from __future__ import annotations

from ..base import events as engine_events
from ..base.events import RunPhase

__all__ = ["RunPhase", "engine_events"]
