"""The owner's approval for MCP tools that may change something (no `readOnlyHint: true`).

LLM decides, runtime enforces: such a call is not made when the model asks for it. Its tool
result says it waits for approval, and the pump stops at an `mcp_approval` widget, the same way
it stops at a question (so the wait survives a restart, a replica take-over and `*stop`). The
answer comes back as the run's next input; `settle` then makes the call (approved) or not
(denied) and tells the model the outcome as an MCP_APPROVAL_RESULT note. The call itself is
found again in the conversation log, so nothing but the log has to survive the wait.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ...base.wrappers import parse_widget_submit
from ..base import ToolContext, ToolOutcome, fail, ok
from .adapter import SEPARATOR, McpTool, argument_problems
from .hub import McpHub, result_size

if TYPE_CHECKING:
    from ...store.history import History

APPROVAL_TYPE = "mcp_approval"
PENDING_STATUS = "awaiting_approval"
RESULT_HEADER = "MCP_APPROVAL_RESULT"
NOTE_PART = "mcp_approval"
MAX_SHOWN_ARGUMENTS = 1_500
DENIED = "MCP_CALL_DENIED"


def widget_id(call_id: str) -> str:
    return "mcp-approval-" + hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:16]


def arguments_hash(arguments: dict[str, Any]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def approval_widget(tool: McpTool, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    shown = json.dumps(arguments, indent=2, ensure_ascii=False, default=str)
    if len(shown) > MAX_SHOWN_ARGUMENTS:
        shown = shown[:MAX_SHOWN_ARGUMENTS] + "\n… (truncated)"
    message = (
        f"**Approve a tool call?** The agent wants to run `{tool.name}` on the MCP server `{tool.server}`, "
        "which may change something outside the project.\n\nArguments:\n```\n" + shown + "\n```"
    )
    return {
        "widgetId": widget_id(call_id),
        "type": APPROVAL_TYPE,
        "message": message,
        "server": tool.server,
        "tool": tool.name,
        "toolCallId": call_id,
    }


def _audit(ctx: ToolContext, tool: McpTool, arguments: dict[str, Any], result: dict[str, Any],
           approved_by: str | None, started: float) -> None:
    if ctx.audit is None:
        return
    ctx.audit({
        "kind": "mcp.call",
        "server": tool.server,
        "tool": tool.name,
        "argsHash": arguments_hash(arguments),
        "approvedBy": approved_by,
        "ok": bool(result.get("ok")),
        "durationMs": round((time.perf_counter() - started) * 1000, 3),
        "sizeBytes": result_size(result),
    })


async def execute(hub: McpHub, tool: McpTool, arguments: dict[str, Any], ctx: ToolContext, call_id: str) -> ToolOutcome:
    """A model's call: validated against the server's schema, then made, or held for approval."""
    problems = argument_problems(tool, arguments)
    if problems:
        text = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
        return ToolOutcome(fail("E_INVALID_ARGS", f"Invalid arguments for {tool.wire}: {text}.", errors=problems))
    if tool.needs_approval:
        if ctx.mode != "run":  # not offered outside runs; a model naming it anyway gets this
            return ToolOutcome(fail("TOOL_NOT_AVAILABLE", f"'{tool.wire}' changes things and is only available in a run."))
        message = (
            "This tool may change something outside the project, so the call waits for the run owner's "
            f"approval. Its outcome will follow as {RESULT_HEADER}; do not call it again meanwhile."
        )
        return ToolOutcome(ok(status=PENDING_STATUS, message=message), widget=approval_widget(tool, arguments, call_id))
    started = time.perf_counter()
    result = await hub.call(tool, arguments, ctx.policy.max_read_bytes)
    _audit(ctx, tool, arguments, result, "not needed" if tool.read_only else "auto_approve", started)
    return ToolOutcome(result)


# ---- the answer ------------------------------------------------------------------------------


def _pending_calls(history: History) -> dict[str, dict[str, Any]]:
    """widget id -> {callId, name, arguments} for every call still waiting for approval."""
    calls: dict[str, dict[str, Any]] = {}
    waiting: dict[str, dict[str, Any]] = {}
    for entry in history.entries:
        role = entry.get("role")
        if role == "assistant":
            for call in entry.get("tool_calls") or ():
                function = call.get("function") or {}
                calls[str(call.get("id"))] = {"callId": str(call.get("id")), "name": function.get("name", ""),
                                              "arguments": function.get("arguments") or ""}
        elif role == "tool" and _is_pending(entry):
            call = calls.get(str(entry.get("tool_call_id")))
            if call is not None and SEPARATOR in str(call["name"]):
                waiting[widget_id(call["callId"])] = call
        elif entry.get("part") == NOTE_PART:
            waiting.pop(str(entry.get("widgetId")), None)
    return waiting


def _is_pending(entry: dict[str, Any]) -> bool:
    content = str(entry.get("content") or "")
    if PENDING_STATUS not in content:
        return False
    try:
        result = json.loads(content)
    except ValueError:
        return False
    return isinstance(result, dict) and result.get("status") == PENDING_STATUS


Append = Callable[[str, str], None]  # (note text, widget id)
Executed = Callable[[str, str, dict[str, Any]], Awaitable[None]]  # (wire name, arguments, result)


async def settle(user_input: str | None, history: History, hub: McpHub | None, ctx: ToolContext,
                 append: Append, executed: Executed) -> bool:
    """Resolve waiting approvals with this input; True when the input was an approval answer (consumed)."""
    waiting = _pending_calls(history)
    if not waiting:
        return False
    answer = parse_widget_submit(user_input)
    is_answer = answer is not None and answer.get("type") == APPROVAL_TYPE
    for wid, call in waiting.items():
        value = answer.get("value") if is_answer and answer and answer.get("widgetId") == wid else None
        approved = isinstance(value, dict) and value.get("approved") is True
        who = str(value.get("by") or "the run owner") if isinstance(value, dict) else None
        why = None if approved else (
            "The run owner replied without approving it" if not is_answer
            else f"{who} denied it" if who else "Another call's question was answered, not this one's"
        )
        result = await _decide(call, approved, who, hub, ctx, why)
        if approved and isinstance(result, dict):
            await executed(call["name"], call["arguments"], result)
        note = {"toolCallId": call["callId"], "tool": call["name"], "approved": approved, "result": result}
        if approved:
            note["approvedBy"] = who
        append(f"{RESULT_HEADER}\n{json.dumps(note, ensure_ascii=False, default=str)}", wid)
    return is_answer


async def _decide(call: dict[str, Any], approved: bool, who: str | None, hub: McpHub | None, ctx: ToolContext,
                  why: str | None) -> dict[str, Any]:
    if not approved:
        message = f"{why}: the call was not made. Do not retry it; tell the user it was not done and go on."
        return {"ok": False, "code": DENIED, "error": {"code": DENIED, "message": message}}
    tool = hub.find(call["name"], ctx.policy.mcp_servers, changes_allowed=True) if hub is not None else None
    if tool is None:
        return fail("TOOL_NOT_AVAILABLE", f"'{call['name']}' is no longer available to this agent; the call was not made.")
    try:
        arguments = json.loads(call["arguments"]) if str(call["arguments"]).strip() else {}
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict) or argument_problems(tool, arguments):
        return fail("E_INVALID_ARGS", f"The approved arguments for {tool.wire} are not valid; the call was not made.")
    started = time.perf_counter()
    result = await hub.call(tool, arguments, ctx.policy.max_read_bytes)
    _audit(ctx, tool, arguments, result, who, started)
    return result
