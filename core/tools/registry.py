"""ToolHost: which tools a context may use, their wire schemas, and one never-raising execute().

Names travel as `fs_read` on the wire (OpenAI function names cannot hold dots) and as
`fs.read` in audit logs; both spellings are accepted from the model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from pydantic import BaseModel, ValidationError

from ..base.errors import CrewError
from ..package.script_deps import close_scripts, warm_scripts
from ..store.runs_model import utc_now
from . import args as A
from .ask_user import ask_user
from .audit import capped_json, sanitise_input, sanitise_output
from .base import ToolContext, ToolOutcome, fail
from .fs_read import list_dir, read
from .fs_search import search
from .fs_write import apply_patch, write
from .rewind import rewind
from .shell.command_sandbox import start_up_line
from .shell.shell_run import audit_denied, shell_run

if TYPE_CHECKING:
    from ..package.models import Package
    from .shell.command_config import CommandsConfig
    from .mcp.adapter import McpTool
    from .mcp.server_config import McpServerConfig
    from .mcp.hub import McpHub

log = logging.getLogger(__name__)

Runner = Callable[[Any, ToolContext], Awaitable[ToolOutcome]]
DeniedHook = Callable[[ToolContext, dict[str, Any], "str | None"], None]  # (context, arguments, denied by)


@dataclass(frozen=True)
class Tool:
    wire: str
    args: type[BaseModel]
    run: Runner
    denied: DeniedHook | None = None  # audits a call the run owner denied (it never ran)


TOOLS: dict[str, Tool] = {
    t.wire: t
    for t in (
        Tool("fs_read", A.ReadArgs, read),
        Tool("fs_list", A.ListArgs, list_dir),
        Tool("fs_search", A.SearchArgs, search),
        Tool("fs_write", A.WriteArgs, write),
        Tool("fs_apply_patch", A.PatchArgs, apply_patch),
        Tool("ui_ask_user", A.WidgetPayload, ask_user),
        Tool("workflow_rewind", A.RewindArgs, rewind),
        Tool("shell_run", A.ShellRunArgs, shell_run, denied=audit_denied),
    )
}
_READ_ONLY = ("fs_read", "fs_list", "fs_search", "ui_ask_user")
_ASK_ONLY = ("ui_ask_user",)


def wire_name(name: str) -> str:
    """`fs.read` -> `fs_read`; `fs.apply_patch` -> `fs_apply_patch`."""
    return name.strip().replace(".", "_", 1)


def canonical_name(name: str) -> str:
    """`fs_read` -> `fs.read`; `fs_apply_patch` -> `fs.apply_patch`; unknown names pass through."""
    name = name.strip()
    return name if "." in name else name.replace("_", ".", 1)


def available(ctx: ToolContext) -> tuple[str, ...]:
    """Wire names this context may call, in a stable order: every tool in a run; outside a run only the
    read-only ones and `ui_ask_user` (writes happen only inside runs); just `ui_ask_user` when fs is off."""
    if not ctx.policy.fs_enabled:
        return _ASK_ONLY
    if ctx.mode != "run":
        return _READ_ONLY
    names = tuple(TOOLS)  # read at each call: a tool registered later is offered
    return names if ctx.policy.shell is not None else tuple(t for t in names if t != "shell_run")


@cache
def _specs(names: tuple[str, ...]) -> list[dict[str, Any]]:
    out = []
    for name in names:
        params = A.wire_schema(TOOLS[name].args)
        description = params.pop("description", "")
        out.append({"type": "function", "function": {"name": name, "description": description, "parameters": params}})
    return out


class ToolHost:
    """Executes the model's tool calls inside the sandbox; every call returns a ToolOutcome.

    With an McpHub, the MCP tools the context's policy allows come after the built-in ones
    (in agent and chat conversations only those that need no approval).
    """

    @classmethod
    def with_servers(cls, servers: Mapping[str, McpServerConfig], home: Path | None) -> ToolHost:
        """The built-in tools plus `servers` (`mcp_servers:`); stdio servers log to HOME/logs/mcp."""
        from .mcp import hub_for

        return cls(hub_for(servers, home))

    def __init__(self, mcp: McpHub | None = None) -> None:
        self.mcp = mcp
        self._warm_up: asyncio.Task[None] | None = None
        self._announced = False  # the sandbox line is logged once (announce_sandbox)

    @property
    def generation(self) -> int:
        """Changes when the offered MCP tools change (tool specs are cached by it)."""
        return self.mcp.generation if self.mcp is not None else 0

    async def prepare(self, ctx: ToolContext) -> None:
        """Start the MCP servers this context may use, if they are not up yet (before specs())."""
        if self.mcp is not None and ctx.policy.mcp_servers:
            await self.mcp.discover(ctx.policy.mcp_servers)

    async def warm_up(self, commands: CommandsConfig | None = None, packages: Iterable[Package] = ()) -> None:
        """At start-up, so a first call finds things ready and the log says early what cannot work: every
        configured MCP server starts in the background; with commands on, one line says whether the sandbox
        works here (or the fix), and the packages' BMAD scripts are prepared in the background."""
        if self.mcp is not None and self._warm_up is None:
            self._warm_up = asyncio.create_task(self.mcp.discover(self.mcp.names))
        if commands is not None:
            await self.announce_sandbox(commands)
            await warm_scripts(commands.scripts_cache, packages)

    async def announce_sandbox(self, commands: CommandsConfig | None) -> None:
        """With commands on, log once whether the sandbox works here (or the fix). A surface calls it first
        thing, so an operator reads it before anything else can go wrong (Slack unreachable, say)."""
        if commands is not None and not self._announced:
            self._announced = True
            log.log(*await start_up_line(commands))

    async def close(self) -> None:
        """End the MCP servers (stdio ones with their process group) and the script preparations."""
        if self._warm_up is not None:
            self._warm_up.cancel()
        if self.mcp is not None:
            await self.mcp.close()
        await close_scripts()

    def mcp_tools(self, ctx: ToolContext) -> list[McpTool]:
        if self.mcp is None or not ctx.policy.mcp_servers:
            return []
        return self.mcp.tools(ctx.policy.mcp_servers, changes_allowed=ctx.mode == "run")

    def specs(self, ctx: ToolContext) -> list[dict[str, Any]]:
        return [dict(s) for s in _specs(available(ctx))] + [t.spec() for t in self.mcp_tools(ctx)]

    async def execute(self, name: str, raw_arguments: str, ctx: ToolContext, *, call_id: str = "") -> ToolOutcome:
        started = time.perf_counter()
        seen: dict[str, Any] = {"input": {"raw": (raw_arguments or "")[:200]}}
        try:
            outcome = await self._execute(name, raw_arguments, ctx, seen)
        except CrewError as exc:
            outcome = ToolOutcome(fail(exc.code, exc.message, **exc.details))
        except Exception:
            log.exception("tool %s failed", name)
            outcome = ToolOutcome(
                fail("E_INTERNAL", "The tool failed unexpectedly. Try again, or take a different approach.")
            )
        outcome.result, outcome.result_json = capped_json(outcome.result)
        self._audit(ctx, call_id, name, seen["input"], outcome, started)
        return outcome

    def record_denial(self, name: str, raw_arguments: str, ctx: ToolContext, denied_by: str | None) -> None:
        """A held call the owner denied: the tool's own audit of it, for tools that keep one (commands)."""
        tool = TOOLS.get(wire_name(name or ""))
        if tool is None or tool.denied is None:
            return
        try:
            arguments = json.loads(raw_arguments) if raw_arguments and raw_arguments.strip() else {}
        except (ValueError, RecursionError):
            arguments = {}
        tool.denied(ctx, arguments if isinstance(arguments, dict) else {}, denied_by)

    async def _execute(
        self, name: str, raw: str, ctx: ToolContext, seen: dict[str, Any]
    ) -> ToolOutcome:
        wire = wire_name(name or "")
        allowed = available(ctx)
        mcp_tool = next((t for t in self.mcp_tools(ctx) if t.wire == wire), None)
        if wire not in allowed and mcp_tool is None:
            offered = [*allowed, *(t.wire for t in self.mcp_tools(ctx))]
            why = "is not available here" if wire in TOOLS else "is not a known tool"
            message = f"'{name}' {why}. Available tools: {', '.join(offered)}."
            return ToolOutcome(fail("TOOL_NOT_AVAILABLE", message, available=offered))
        try:
            parsed = json.loads(raw) if raw and raw.strip() else {}
        except json.JSONDecodeError as exc:
            message = (
                f"The arguments of {wire} are not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}). "
                "Send a single JSON object."
            )
            return ToolOutcome(fail("TOOL_ARGS_INVALID_JSON", message))
        except RecursionError:
            message = f"The arguments of {wire} are nested too deeply. Send a flatter JSON object."
            return ToolOutcome(fail("TOOL_ARGS_INVALID_JSON", message))
        seen["input"] = sanitise_input(parsed)
        if not isinstance(parsed, dict):
            return ToolOutcome(fail("E_INVALID_ARGS", f"The arguments of {wire} must be a JSON object."))
        if mcp_tool is not None and self.mcp is not None:
            from .mcp.calls import arguments_hash, execute as execute_mcp

            seen["input"] = {"server": mcp_tool.server, "tool": mcp_tool.name, "argsHash": arguments_hash(parsed)}
            return await execute_mcp(self.mcp, mcp_tool, parsed, ctx)
        tool = TOOLS[wire]
        try:
            args = tool.args.model_validate(parsed)
        except ValidationError as exc:
            text, errors = A.readable(exc)
            return ToolOutcome(fail("E_INVALID_ARGS", f"Invalid arguments for {wire}: {text}.", errors=errors))
        return await tool.run(args, ctx)

    @staticmethod
    def _audit(ctx: ToolContext, call_id: str, name: str, logged_input: Any, outcome: ToolOutcome, started: float) -> None:
        if ctx.audit is None:
            return
        event = {
            "ts": utc_now(),
            "kind": "tool.exec",
            "toolCallId": call_id,
            "toolName": canonical_name(wire_name(name or "")),
            "agentId": ctx.agent_id,
            "input": logged_input,
            "output": sanitise_output(outcome.result),
            "durationMs": round((time.perf_counter() - started) * 1000, 3),
        }
        if outcome.approval is not None:
            event["approval"] = "requested"  # nothing ran; the decision is its own audit line
        elif ctx.approved is not None:
            event["approvedBy"] = ctx.approved
        try:
            ctx.audit(event)
        except OSError:  # the tool's work is done; a full or broken disk must not turn it into a failure
            log.exception("audit write failed for tool call %s", call_id)
