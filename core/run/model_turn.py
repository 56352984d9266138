"""One model call of a run: the prompt, the token budget check, the call (abandoned by *stop), and
the reply in the conversation log and the audit log before anything acts on it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..base.attribution import attributed
from ..base.errors import CrewError
from ..base.events import AssistantTextDelta, EngineEvent, LLMRetrying
from ..model.client import LLMReply
from ..model.wire import ToolSet
from ..prompts.run_prompt import RunPrompt
from ..store.history import History, estimate_tokens, message_tokens
from ..store.runs_model import RunError, RunRecord
from ..tools.base import ToolContext
from ..tools.registry import wire_name
from .pump_deps import PumpControl, PumpDeps

Message = dict[str, Any]
REPLY_ALLOWANCE_TOKENS = 1_000  # what a reply may add to a call, for the token budget check
BUDGET_CODE = "RUN_TOKEN_BUDGET"


@dataclass(frozen=True)
class ModelAsk:
    """Where the run stands for this call."""

    fm: dict[str, Any]
    complete: bool
    state_version: int
    closing_turn: bool
    scope: str
    node_id: str


@dataclass(frozen=True)
class TurnEnded:
    """No reply: `error` None when *stop abandoned the call, else why (RUN_TOKEN_BUDGET pauses the run)."""

    error: RunError | None = None


class ModelTurns:
    """The run's model calls in one pump, and what they cost."""

    def __init__(
        self,
        deps: PumpDeps,
        record: RunRecord,
        prompt: RunPrompt,
        history: History,
        audit: Callable[[dict[str, Any]], None],
        emit: Callable[[EngineEvent], Awaitable[None]],
        control: PumpControl,
        *,
        streaming: bool,
    ) -> None:
        self.deps, self.record, self.prompt, self.history = deps, record, prompt, history
        self.audit, self.emit, self.control, self.streaming = audit, emit, control, streaming
        self.llm_calls = 0
        self.llm_seconds = 0.0
        self.model = record.model or deps.llm.model  # the conversation's `*model` choice, set before the pump

    async def ask(self, ctx: ToolContext, at: ModelAsk) -> LLMReply | TurnEnded:
        tools = await self.deps.tools.prepared(ctx)
        messages = self.prompt.messages(
            ctx,
            tools.names,
            at.fm,
            complete=at.complete,
            state_version=at.state_version,
            history=self.history,
            closing_turn=at.closing_turn,
            scope=at.scope,
        )
        turn = self.llm_calls + 1
        over_budget = self._over_budget(messages, tools)
        if over_budget is not None:
            return TurnEnded(over_budget)
        self.audit({"kind": "llm.request", "turn": turn, "messageCount": len(messages), "agentId": ctx.agent_id})
        run_id = self.record.run_id

        async def on_retry(attempt: int, reason: str) -> None:
            attempts = self.deps.llm.settings.attempts
            await self.emit(LLMRetrying(run_id=run_id, attempt=attempt, reason=reason, attempts=attempts))

        async def on_delta(text: str, *, restart: bool = False) -> None:
            await self.emit(
                AssistantTextDelta(run_id=run_id, text=text, turn=turn, agent_id=ctx.agent_id, restart=restart)
            )

        call = self.deps.llm.complete(
            messages,
            tools,
            on_retry=on_retry,
            message_json=self.history.wire_json,
            on_delta=on_delta if self.streaming else None,
            model=self.model,
        )
        with attributed(run_id=run_id):  # the task copies it: the call's usage is booked to this run
            task = asyncio.create_task(call)
        self.control.llm_task = task
        started = time.perf_counter()
        try:
            reply = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.control.stop and task.cancelled() and not (current and current.cancelling()):
                return TurnEnded()
            raise
        except CrewError as exc:
            self.audit({"kind": "llm.error", "turn": turn, "code": exc.code, "message": exc.message})
            self.history.append(
                {"role": "assistant", "content": f"LLM_ERROR {exc.code}: {exc.message}"}, part="error", scope=at.scope
            )
            return TurnEnded(RunError(code=exc.code, message=exc.message))
        finally:
            self.llm_seconds += time.perf_counter() - started
            self.control.llm_task = None
        self.llm_calls += 1
        self.record.usage.add(reply.usage, 0 if reply.usage is not None else _prompt_estimate(messages, tools))
        self._record(reply, ctx, turn, at)
        return reply

    def _record(self, reply: LLMReply, ctx: ToolContext, turn: int, at: ModelAsk) -> None:
        message: Message = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in reply.tool_calls
            ]
        message.update(reply.extra)
        self.history.append(message, part="assistant", agentId=ctx.agent_id, nodeId=at.node_id, scope=at.scope)
        self.record.note_model(self.model)
        self.audit(
            {
                "kind": "llm.response",
                "turn": turn,
                "model": self.model,
                "toolCalls": [wire_name(c.name) for c in reply.tool_calls],
                "finishReason": reply.finish_reason,
                "usage": reply.usage,
            }
        )

    def _over_budget(self, messages: list[Message], tools: ToolSet) -> RunError | None:
        """Pause before a call that would take the run past its token budget (resumable with a higher one)."""
        budget = self.record.token_budget or self.deps.settings.run_token_budget
        if budget is None:
            return None
        used = self.record.usage.total_tokens
        needed = _prompt_estimate(messages, tools) + REPLY_ALLOWANCE_TOKENS
        if used + needed <= budget:
            return None
        message = (
            f"Paused before the next model call: this run has used {used:,} of its {budget:,}-token budget "
            f"and the call would need about {needed:,} more. Raise the run's token budget to continue."
        )
        return RunError(code=BUDGET_CODE, message=message)


def _prompt_estimate(messages: list[Message], tools: ToolSet) -> int:
    """Our estimate of a request's prompt tokens, for the budget and for endpoints that report no usage."""
    return sum(message_tokens(m) for m in messages) + estimate_tokens(tools.json)
