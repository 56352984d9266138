"""All configured MCP servers of the process: which tools they offer, and one call at a time to them.

Servers start when a conversation that may use them first needs their tools, and stay up for the
next ones. A server that cannot start is left out (logged with the reason) and tried again after
`retry_after` seconds; its tools are simply not offered meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT

from ..base import fail, ok
from .adapter import McpTool, adapt, result_text
from .server_config import McpServerConfig, hide_secrets
from .server import ServerConnection, ServerDied, ServerUnavailable

log = logging.getLogger(__name__)
QUIET_LOGGERS = ("httpx2", "mcp")


class McpHub:
    def __init__(
        self,
        servers: Mapping[str, McpServerConfig],
        *,
        errlog_dir: Path | None = None,
        retry_after: float = 60.0,
    ) -> None:
        for name in QUIET_LOGGERS:  # they log request URLs, which may carry a ${VAR} value
            logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger(name).level))
        self.configs = dict(servers)
        self.connections = {n: ServerConnection(n, c, errlog_dir=errlog_dir) for n, c in self.configs.items()}
        self.catalogue: dict[str, list[McpTool]] = {}
        self.retry_after = retry_after
        self.generation = 0  # bumped whenever the offered tools change (tool specs are cached by it)
        self._failed: dict[str, float] = {}
        self._discovering: dict[str, asyncio.Task[None]] = {}

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.configs)

    async def discover(self, servers: Iterable[str]) -> None:
        """Start the given servers that are not up yet and list their tools (concurrently, bounded)."""
        now = time.monotonic()
        tasks = []
        for name in servers:
            if name not in self.configs or name in self.catalogue:
                continue
            if now - self._failed.get(name, -self.retry_after - 1) < self.retry_after:
                continue
            task = self._discovering.get(name)
            if task is None or task.done():
                task = self._discovering[name] = asyncio.create_task(self._discover_one(name))
            tasks.append(task)
        if tasks:
            await asyncio.gather(*(asyncio.shield(t) for t in tasks), return_exceptions=True)

    async def _discover_one(self, name: str) -> None:
        connection = self.connections[name]
        try:
            await connection.ensure()
        except ServerUnavailable as exc:
            self._failed[name] = time.monotonic()
            log.warning("MCP server %s is not available: %s; its tools are not offered", name, exc)
            return
        tools, problems = adapt(name, self.configs[name], connection.listed)
        for problem in problems:
            log.warning("MCP server %s: %s; that tool is not offered", name, problem)
        self.catalogue[name] = tools
        self._failed.pop(name, None)
        self.generation += 1
        log.info("MCP server %s: %d tool(s) offered", name, len(tools))

    def tools(self, servers: Iterable[str], *, changes_allowed: bool) -> list[McpTool]:
        """The discovered tools of `servers`; without `changes_allowed` only those that need no approval."""
        found = []
        for name in servers:
            for tool in self.catalogue.get(name, ()):
                if changes_allowed or not tool.needs_approval:
                    found.append(tool)
        return found

    def find(self, wire: str, servers: Iterable[str], *, changes_allowed: bool) -> McpTool | None:
        for tool in self.tools(servers, changes_allowed=changes_allowed):
            if tool.wire == wire:
                return tool
        return None

    async def call(self, tool: McpTool, arguments: dict[str, Any], max_bytes: int) -> dict[str, Any]:
        """tools/call as a tool result; never raises. A server that echoes a `${VAR}` value gets it masked."""
        result = await self._call(tool, arguments, max_bytes)
        secrets = self.connections[tool.server].secrets
        if not secrets:
            return result
        text = json.dumps(result, ensure_ascii=False, default=str)
        masked = hide_secrets(text, secrets)
        return result if masked == text else dict(json.loads(masked))

    async def _call(self, tool: McpTool, arguments: dict[str, Any], max_bytes: int) -> dict[str, Any]:
        config = self.configs[tool.server]
        timeout = config.timeout_seconds
        where = f"The MCP server '{tool.server}'"
        try:
            result = await asyncio.wait_for(
                self.connections[tool.server].call(tool.name, arguments, timeout), timeout * 2 + 5
            )
        except ServerUnavailable as exc:
            message = f"{where} is not available right now ({exc}). Go on without it, or try again later."
            return fail("MCP_SERVER_UNAVAILABLE", message)
        except ServerDied:
            log.warning("MCP server %s stopped during a call to %s; it is started again on the next call", tool.server, tool.name)
            message = (
                f"{where} stopped while running {tool.name}: the call did not finish and may or may not have "
                "taken effect. The server is started again on the next call."
            )
            return fail("MCP_SERVER_CRASHED", message)
        except asyncio.TimeoutError:
            return fail("MCP_TIMEOUT", f"{where} did not answer {tool.name} within {timeout:g} s.")
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                return fail("MCP_TIMEOUT", f"{where} did not answer {tool.name} within {timeout:g} s.")
            return fail("MCP_PROTOCOL_ERROR", f"{where} refused the call to {tool.name}: {exc.message[:500]}")
        except Exception as exc:
            reason = hide_secrets(f"{type(exc).__name__}: {exc}", self.connections[tool.server].secrets)
            log.error("MCP call %s on server %s failed unexpectedly: %s", tool.name, tool.server, reason[:500])
            return fail("MCP_CALL_FAILED", f"The call to {tool.name} on the MCP server '{tool.server}' failed unexpectedly.")
        text, structured, truncated = result_text(result, max_bytes)
        if result.is_error:
            return fail("MCP_TOOL_ERROR", f"{tool.name} reported an error: {text[:2000] or '(no details)'}")
        payload: dict[str, Any] = {"server": tool.server, "tool": tool.name, "content": text}
        if structured is not None:
            payload["structured"] = structured
        if truncated:
            payload["truncated"] = True
            payload["hint"] = f"The result was cut at {max_bytes} bytes; ask the tool for less (a filter or a page)."
        return ok(**payload)

    async def close(self) -> None:
        """End every server (stdio servers with their process group)."""
        for task in self._discovering.values():
            task.cancel()
        await asyncio.gather(*(c.close() for c in self.connections.values()), return_exceptions=True)
        self.catalogue.clear()


def result_size(result: dict[str, Any]) -> int:
    return len(json.dumps(result, ensure_ascii=False, default=str).encode("utf-8"))
