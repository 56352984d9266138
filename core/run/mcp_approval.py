"""The pump's side of MCP approvals: the owner's answer becomes the waiting call's outcome.

Kept out of pump.py: the pump asks `settle_in_pump` once, when an input arrives.
"""

from __future__ import annotations

import json
from typing import Any

from ..base.events import ToolExecuted
from .tool_round import redact


async def settle_in_pump(pump: Any) -> bool:  # a core.run.pump.Pump (not imported: no cycle)
    """Resolve approvals the run waits for; True when the input was the approval answer itself."""
    host = pump.deps.tools
    if host.mcp is None:
        return False
    from ..tools.mcp.approval import NOTE_PART, settle

    ctx = pump._tool_context()
    await host.prepare(ctx)  # after a restart the server is started again for the approved call

    def append(text: str, widget_id: str) -> None:
        text = redact(text, pump.recorder.redactions)
        pump.history.append({"role": "user", "content": text}, part=NOTE_PART, widgetId=widget_id, scope=pump._scope())

    async def executed(wire: str, arguments: str, result: dict[str, Any]) -> None:
        error = result.get("error") if not result.get("ok") else None
        code = error.get("code") if isinstance(error, dict) else None
        line = f"{wire} (approved)" + (f" — {code}" if code else "")
        event = ToolExecuted(run_id=pump.record.run_id, tool=wire, ok=bool(result.get("ok")), summary=line[:200],
                             error_code=code)
        await pump.reporter.emit(event)
        pump.audit({"kind": "mcp.approved_call", "tool": wire, "ok": bool(result.get("ok")),
                    "resultBytes": len(json.dumps(result, default=str))})

    return await settle(pump.user_input, pump.history, host.mcp, ctx, append, executed)
