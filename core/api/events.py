"""Events: what the engine reports while a run moves.

The concrete event types are one vocabulary, reached through one namespace: `ev.NodeStarted`,
`ev.LLMRetrying`, and the short texts surfaces show for them (`ev.progress_text`, `ev.retry_note`).
"""

from __future__ import annotations

from ..base import events as ev
from ..base.events import EngineEvent, RunPhase

__all__ = ["EngineEvent", "RunPhase", "ev"]
