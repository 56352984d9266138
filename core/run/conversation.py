"""One-shot conversations outside a run: agent persona chat, ChatMode, exec scripts, prompt actions.

Same composer and tools as a run, but read-only tools plus `ui_ask_user`, no `@state`,
and the history is a plain list the caller keeps (e.g. in its session record).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Sequence
from functools import partial
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from ..base.answers import UserInput
from ..base.errors import CrewError
from ..store.history import DEFAULT_BUDGET_TOKENS, fit_messages, message_tokens, offload_large_result
from ..model.api import LLMReply, ToolCall
from ..model.client import DeltaListener, LLMClient
from ..model.wire import MessageJSON, ToolSet
from ..package.models import Agent, Package
from ..tools.policy import SystemToolPolicy, effective_policy
from ..prompts.composer import PromptComposer
from ..base.wrappers import wrap_user_input
from ..tools.base import Mounts, ToolContext, fail
from ..tools.off_limits import OffLimits
from ..tools.registry import ToolHost, wire_name

ConversationMode = Literal["agent", "chat", "script"]
CONVERSATION_RESULT_LIMIT = 50_000


class TurnDeltaListener(Protocol):
    """Hears the assistant text of model call `turn` as it streams (`restart`: see core.model.completion_stream)."""

    def __call__(self, turn: int, text: str, *, restart: bool = False) -> Awaitable[None]: ...


@dataclass
class ConversationReply:
    text: str  # what to show the user ("" only if the model said nothing and asked nothing)
    widget: dict[str, Any] | None = None  # set when the model called ui_ask_user: render it and wait
    history: list[dict[str, Any]] = field(default_factory=list)  # the caller's history plus this exchange
    tool_calls: int = 0
    llm_calls: int = 0


async def converse(
    llm: LLMClient,
    package: Package,
    agent: Agent | None,
    history: list[dict[str, Any]],
    user_text: UserInput,
    *,
    project_root: str | Path,
    mode: ConversationMode | None = None,
    extra_context: Sequence[str] = (),
    tools: ToolHost | None = None,
    system_policy: SystemToolPolicy | None = None,
    off_limits: OffLimits = OffLimits(),
    max_turns: int = 12,
    budget_tokens: int = DEFAULT_BUDGET_TOKENS,
    composer: PromptComposer | None = None,
    on_delta: TurnDeltaListener | None = None,
    model: str | None = None,
) -> ConversationReply:
    """Answer `user_text` (typed words, or the answer to the question asked last) as `agent` (None = plain
    chat) with a small read-only tool loop.

    `history` holds OpenAI-style message dicts from earlier calls (it is not modified; the reply
    carries the extended copy). `extra_context` messages (an exec script, prompt text, a data
    preview — alias paths only) are added, and kept in the history, just before the user input.
    `on_delta(turn, text)` hears the assistant text of each model call as it streams; `model` is the
    conversation's own choice (None: the configured model).
    Raises CrewError (LLM_* codes, ENGINE_MAX_TURNS_EXCEEDED) when no answer can be produced.
    """
    mode = mode or ("agent" if agent is not None else "chat")
    host = tools or ToolHost()
    composer = composer or PromptComposer(package)
    persona = None if mode == "chat" else agent
    mounts = Mounts(project=Path(project_root), pkg=package.root, state=None, off_limits=off_limits)
    ctx = _tool_context(mounts, persona, mode, system_policy)
    await host.prepare(ctx)  # the MCP servers this agent may use, started on first need
    specs = ToolSet.of(host.specs(ctx))  # encoded once for every turn of this conversation
    system = composer.system_layers(mode=mode, agent=persona, policy=ctx.policy, tool_names=specs.names)
    out = [dict(m) for m in history]
    out.extend({"role": "user", "content": text} for text in extra_context if text.strip())
    if not isinstance(user_text, str) or user_text.strip():
        out.append({"role": "user", "content": wrap_user_input(user_text)})
    budget = budget_tokens - sum(message_tokens(m) for m in system)
    reply = ConversationReply(text="", history=out)
    encoded = MessageJSON()  # each turn of the tool loop re-sends the earlier messages
    for turn in range(1, max_turns + 1):
        listener: DeltaListener | None = None
        if on_delta is not None:
            listener = partial(on_delta, turn)
        answer = await llm.complete(
            system + fit_messages(out, max(budget, 0)), specs, message_json=encoded, on_delta=listener, model=model
        )
        reply.llm_calls += 1
        out.append(_assistant_message(answer))
        if answer.content and answer.content.strip():
            reply.text = answer.content
        if not answer.tool_calls:
            return reply
        for call in answer.tool_calls:
            await _run_tool_call(host, ctx, call, reply)
        if reply.widget is not None:
            if not reply.text:
                reply.text = str(reply.widget.get("message") or "")
            return reply
    raise CrewError(
        "ENGINE_MAX_TURNS_EXCEEDED",
        f"The assistant used {max_turns} tool turns without answering; ask a narrower question.",
        {"tool": wire_name(answer.tool_calls[-1].name) if answer.tool_calls else None},
    )


def _tool_context(
    mounts: Mounts, persona: Agent | None, mode: ConversationMode, system_policy: SystemToolPolicy | None
) -> ToolContext:
    """Tools outside a run: the project and package mounted, no run state, the persona's policy."""
    return ToolContext(
        mounts=mounts,
        policy=effective_policy(system_policy or SystemToolPolicy(), persona),
        mode=mode,
        agent_id=persona.id if persona is not None else "chat",
    )


def _assistant_message(answer: LLMReply) -> dict[str, Any]:
    """The model's answer as a history message, its tool calls included so their results can follow."""
    message: dict[str, Any] = {"role": "assistant", "content": answer.content}
    if answer.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in answer.tool_calls
        ]
    return message


async def _run_tool_call(host: ToolHost, ctx: ToolContext, call: ToolCall, reply: ConversationReply) -> None:
    """Make one tool call and add its (possibly offloaded) result to the reply's history."""
    outcome = await host.execute(call.name, call.arguments, ctx, call_id=call.id)
    reply.tool_calls += 1
    result = outcome.result
    if outcome.approval is not None:  # no owner to ask outside a run: the call is not made
        result = fail(outcome.approval.denied_code, "This call needs the run owner's approval, which only "
                      "a workflow run can ask for; it was not made.")
    content = offload_large_result(
        json.dumps(result, ensure_ascii=False, default=str),
        message_id=call.id,
        real_dir=None,
        alias_dir=None,
        limit=CONVERSATION_RESULT_LIMIT,
    )
    reply.history.append({"role": "tool", "tool_call_id": call.id, "content": content})
    if outcome.widget is not None:
        reply.widget = outcome.widget
