"""One MCP tool call as the model makes it: arguments checked against the server's schema, the owner's
approval asked for tools that may change something (no `readOnlyHint: true`), the call made, audited.

LLM decides, runtime enforces: such a call is not made when the model first asks for it. Its outcome
is an ApprovalRequest (nothing ran), and the pump holds the call until the run owner decides
(core.run.tool_approvals). On Approve the pump makes the same call again with `ctx.approved` set,
and this module then makes it; its real result is what the model gets.
"""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

from ..base import ApprovalRequest, ToolContext, ToolOutcome, fail
from .adapter import McpTool, argument_problems
from .hub import McpHub, result_size

MAX_SHOWN_ARGUMENTS = 1_500
DENIED = "MCP_CALL_DENIED"
APPROVAL_TITLE = "Approve a tool call?"


def arguments_hash(arguments: dict[str, Any]) -> str:
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def approval_request(tool: McpTool, arguments: dict[str, Any]) -> ApprovalRequest:
    shown = json.dumps(arguments, indent=2, ensure_ascii=False, default=str)
    if len(shown) > MAX_SHOWN_ARGUMENTS:
        shown = shown[:MAX_SHOWN_ARGUMENTS] + "\n… (truncated)"
    message = (
        f"The agent wants to run `{tool.name}` on the MCP server `{tool.server}`, "
        "which may change something outside the project.\n\nArguments:\n```\n" + shown + "\n```"
    )
    return ApprovalRequest(kind="mcp", title=APPROVAL_TITLE, message=message, denied_code=DENIED)


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


async def execute(hub: McpHub, tool: McpTool, arguments: dict[str, Any], ctx: ToolContext) -> ToolOutcome:
    """A model's call: validated against the server's schema, then made, or held for approval."""
    problems = argument_problems(tool, arguments)
    if problems:
        text = "; ".join(f"{p['path']}: {p['message']}" for p in problems)
        return ToolOutcome(fail("E_INVALID_ARGS", f"Invalid arguments for {tool.wire}: {text}.", errors=problems))
    approved_by = "not needed" if tool.read_only else "auto_approve"
    if tool.needs_approval:
        if ctx.mode != "run":  # not offered outside runs; a model naming it anyway gets this
            return ToolOutcome(fail("TOOL_NOT_AVAILABLE", f"'{tool.wire}' changes things and is only available in a run."))
        if ctx.approved is None:
            request = approval_request(tool, arguments)
            return ToolOutcome({"ok": False, "status": "approval_required"}, approval=request)
        approved_by = ctx.approved
    started = time.perf_counter()
    result = await hub.call(tool, arguments, ctx.policy.max_read_bytes)
    _audit(ctx, tool, arguments, result, approved_by, started)
    return ToolOutcome(result)
