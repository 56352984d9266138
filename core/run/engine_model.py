"""The engine's settings and what one pump returns (shared by core.run.engine and core.run.pump)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

from ..base.events import EngineEvent, RunPhase
from ..store.history import DEFAULT_BUDGET_TOKENS, LARGE_RESULT_BYTES
from ..tools.policy import SystemToolPolicy
from ..store.runs_model import RunError

Intent = Literal["start", "continue", "resume"]
EventSink = Callable[[EngineEvent], Awaitable[None]]


class EngineSettings(BaseModel):
    max_turns_without_progress: int = 40  # runaway guard: LLM turns since the state last advanced
    max_turns_per_pump: int = 400  # absolute ceiling per user input
    repeated_failure_limit: int = 3  # identical failing calls before the nudge
    history_budget_tokens: int = DEFAULT_BUDGET_TOKENS
    # Re-send every earlier node's turns (the behaviour before node-scoped context); benchmarks only.
    full_history: bool = False
    # Tokens (prompt + completion) a run may use; a call that would go past it pauses the run first.
    run_token_budget: int | None = Field(default=None, ge=1)
    step_inline_max_bytes: int = 16_384
    large_result_bytes: int = LARGE_RESULT_BYTES
    conversation_max_turns: int = 12
    # Conversations of recently pumped runs kept in memory: a run missing here re-reads its log (and
    # re-encodes it for the model) at its next pump. Worth raising to the runs pumping at once.
    kept_histories: int = Field(default=32, ge=0)
    system_policy: SystemToolPolicy = SystemToolPolicy()


class PumpResult(BaseModel):
    run_id: str
    phase: RunPhase
    paused: bool = False
    assistant_text: str | None = None  # the last thing the model said to the user in this pump
    widget: dict[str, Any] | None = None  # set when the pump stopped at ui_ask_user
    error: RunError | None = None  # why it failed, or a warning such as ENGINE_LOOP_DETECTED
    llm_calls: int = 0
    llm_seconds: float = 0.0  # time spent awaiting the model, for overhead measurements
