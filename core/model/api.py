"""What the model client and its SDK side share: settings, the reply, and the listeners a call reports to."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any, Protocol
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, ValidationError

from ..base.errors import CrewError

RetryListener = Callable[[int, str], Awaitable[None] | None]
# Hears a model call end: its reply, or the error it ended with (a CrewError, a cancellation).
CallEnded = Callable[["LLMReply | None", "BaseException | None"], None]
# Told when a model call starts (with the model's name); what it returns hears the call end. Usage,
# metrics and traces watch calls this way, so the client itself stays one call to the endpoint.
CallWatcher = Callable[[str], CallEnded]


class DeltaListener(Protocol):
    """Hears each piece of assistant text; `restart=True` (with empty text) voids the pieces heard so far."""

    def __call__(self, text: str, *, restart: bool = False) -> Awaitable[None] | None: ...


class LLMSettings(BaseModel):
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    # Per attempt, and how many times a failed attempt is repeated: by default a model that hangs is
    # given up on after about three minutes (3 × 60 s plus short back-offs), not left "working" for long.
    timeout: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    temperature: float | None = None
    max_connections: int = Field(default=1000, ge=1)  # open model connections at most (one per call in flight)
    stream: bool = True  # ask for streamed answers (core.model.completion_stream steps down where the endpoint refuses)
    # The person who reads the errors runs this process (a terminal), so a message may name the setting to
    # fix. In Slack the reader is a channel member: settings, hosts and ports go to the operator's log only.
    operator_reads_errors: bool = False

    @property
    def attempts(self) -> int:
        return self.max_retries + 1

    @classmethod
    def from_env(cls, **overrides: Any) -> LLMSettings:
        """CREWAGENT_MODEL, OPENAI_BASE_URL, OPENAI_API_KEY, CREWAGENT_LLM_TIMEOUT (seconds per attempt),
        CREWAGENT_LLM_RETRIES, CREWAGENT_LLM_STREAM (0 turns streaming off); explicit overrides win when
        not None. Bad values raise CrewError."""
        env = os.environ
        values: dict[str, Any] = {
            "model": env.get("CREWAGENT_MODEL") or None,
            "base_url": env.get("OPENAI_BASE_URL") or None,
            "api_key": env.get("OPENAI_API_KEY") or None,
            "timeout": env.get("CREWAGENT_LLM_TIMEOUT", "").strip() or None,
            "max_retries": env.get("CREWAGENT_LLM_RETRIES", "").strip() or None,
        }
        stream = _env_switch("CREWAGENT_LLM_STREAM")
        if stream is not None:
            values["stream"] = stream
        values.update({k: v for k, v in overrides.items() if v is not None})
        try:
            return cls(**{k: v for k, v in values.items() if v is not None})
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise CrewError(
                "LLM_SETTINGS_INVALID",
                f"Invalid model settings ({problems}). CREWAGENT_LLM_TIMEOUT is seconds (> 0), "
                "CREWAGENT_LLM_RETRIES a whole number (>= 0).",
            ) from None


ASK_THE_OPERATOR = "Tell whoever runs the bot."  # Slack's wording: the reader cannot fix the settings


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str  # raw JSON text, exactly as the model sent it


class LLMReply(BaseModel):
    content: str | None = None
    tool_calls: list[ToolCall] = []
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    extra: dict[str, Any] = {}  # provider fields to echo back (e.g. reasoning_content)


def endpoint_name(base_url: str | None) -> str:
    if not base_url:
        return "the OpenAI API"
    parts = urlsplit(base_url)
    return parts.netloc or base_url


def _env_switch(name: str) -> bool | None:
    """An on/off environment variable (1/0, true/false, yes/no, on/off); None when unset."""
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return None
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise CrewError("LLM_SETTINGS_INVALID", f"{name} must be 1 or 0 (on or off), not {value!r}.")
