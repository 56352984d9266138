"""One MCP server: started when first needed, kept open, restarted after it died.

The SDK's transports and ClientSession are anyio context managers that must be entered and left
by one task, so each connection lives in a task of its own that holds them open until `close()`.
Stdio servers run under launcher.py, in their own process group, ended with the bot.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO

import httpx2
from mcp import types
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED

from .server_config import McpServerConfig, hide_secrets

log = logging.getLogger(__name__)
LAUNCHER = str(Path(__file__).with_name("launcher.py"))
MAX_TOOL_PAGES = 20
MIN_START_SECONDS = 10.0  # a short call timeout must not fail a server that is slow to import


class ServerUnavailable(Exception):
    """The server could not be started or reached; the message is safe to show (no secrets)."""


class ServerDied(Exception):
    """The connection broke during a call; the next call starts the server again."""


class ServerConnection:
    def __init__(self, name: str, config: McpServerConfig, *, errlog_dir: Path | None = None) -> None:
        self.name = name
        self.config = config
        self.errlog_dir = errlog_dir
        self.session: ClientSession | None = None
        self.listed: list[types.Tool] = []
        self.starts = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._secrets: tuple[str, ...] = ()

    @property
    def secrets(self) -> tuple[str, ...]:
        """The `${VAR}` values this server was started with (masked wherever its output goes)."""
        return self._secrets

    @property
    def start_seconds(self) -> float:
        return max(self.config.timeout_seconds, MIN_START_SECONDS)

    @property
    def alive(self) -> bool:
        return self.session is not None and self._task is not None and not self._task.done()

    async def ensure(self) -> ClientSession:
        """The open session, starting the server (again) when it is not running."""
        async with self._lock:
            if self.alive:
                assert self.session is not None
                return self.session
            await self._shutdown()
            return await self._start()

    async def _start(self) -> ClientSession:
        self._stop = asyncio.Event()
        ready: asyncio.Future[ClientSession] = asyncio.get_running_loop().create_future()
        ready.add_done_callback(lambda f: f.cancelled() or f.exception())  # a start nobody waits for any more
        self.starts += 1
        self._task = asyncio.create_task(self._serve(ready), name=f"mcp-{self.name}")
        limit = self.start_seconds
        try:
            return await asyncio.wait_for(asyncio.shield(ready), limit)
        except asyncio.TimeoutError:
            await self._shutdown()
            raise ServerUnavailable(f"did not finish starting (initialize and tools/list) within {limit:g} s") from None
        except ServerUnavailable:
            await self._shutdown()
            raise

    async def _serve(self, ready: asyncio.Future[ClientSession]) -> None:
        config, self._secrets = self.config.expanded()
        if config.transport == "stdio" and not _found(config):
            ready.set_exception(ServerUnavailable("its command was not found"))
            return
        errlog = self._errlog()
        try:
            async with AsyncExitStack() as stack:
                streams = await self._open(stack, config, errlog)
                session = await stack.enter_async_context(
                    ClientSession(streams[0], streams[1], read_timeout_seconds=self.start_seconds)
                )
                await session.initialize()
                self.listed = await self._list_tools(session)
                self.session = session
                if not ready.done():
                    ready.set_result(session)
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 (the reason goes to the caller as a value)
            reason = self._reason(exc)
            if not ready.done():
                ready.set_exception(ServerUnavailable(reason))
            elif not self._stop.is_set():
                log.warning("MCP server %s stopped: %s", self.name, reason)
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            self.session = None
            if errlog is not sys.stderr:
                errlog.close()

    async def _open(self, stack: AsyncExitStack, config: McpServerConfig, errlog: TextIO) -> Any:
        if config.transport == "stdio":
            assert config.command is not None
            params = StdioServerParameters(
                command=sys.executable,
                args=["-I", LAUNCHER, config.command, *config.args],
                env=config.env or None,
                cwd=config.cwd,
            )
            return await stack.enter_async_context(stdio_client(params, errlog=errlog))
        assert config.url is not None
        if config.transport == "sse":
            return await stack.enter_async_context(
                sse_client(config.url, headers=config.headers or None, timeout=config.timeout_seconds)
            )
        timeout = httpx2.Timeout(config.timeout_seconds, read=max(300.0, config.timeout_seconds))
        client = await stack.enter_async_context(httpx2.AsyncClient(headers=config.headers, timeout=timeout))
        return await stack.enter_async_context(streamable_http_client(config.url, http_client=client))

    @staticmethod
    async def _list_tools(session: ClientSession) -> list[types.Tool]:
        listed: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_TOOL_PAGES):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return listed

    def _errlog(self) -> TextIO:
        """Where a stdio server's stderr goes: a log file per server (it may print its own secrets)."""
        if self.errlog_dir is None:
            return sys.stderr
        try:
            self.errlog_dir.mkdir(parents=True, exist_ok=True)
            return open(self.errlog_dir / f"{self.name}.log", "a", encoding="utf-8")  # noqa: SIM115
        except OSError:
            return sys.stderr

    def _reason(self, exc: BaseException) -> str:
        if isinstance(exc, BaseExceptionGroup):
            inner = exc.exceptions[0] if exc.exceptions else exc
            return self._reason(inner)
        if isinstance(exc, MCPError) and exc.code == CONNECTION_CLOSED:
            text = "it closed the connection (it may have exited; a stdio server's output is in its log)"
        elif isinstance(exc, MCPError):
            text = f"the server answered with an error: {exc.message}"
        elif isinstance(exc, FileNotFoundError):
            text = "its command was not found"
        elif isinstance(exc, OSError):
            text = f"it could not be started ({exc.strerror or type(exc).__name__})"
        elif isinstance(exc, asyncio.CancelledError):
            text = "its start was cancelled"
        elif isinstance(exc, httpx2.HTTPError):
            text = f"it could not be reached ({type(exc).__name__})"
        else:
            text = f"{type(exc).__name__}: {exc}"
        return hide_secrets(text, self._secrets)[:300]

    async def call(self, tool: str, arguments: dict[str, Any], timeout: float) -> types.CallToolResult:
        """One tools/call; ServerUnavailable / ServerDied / TimeoutError for the caller to turn into a result."""
        session = await self.ensure()
        try:
            return await session.call_tool(tool, arguments, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED or not self.alive:
                await self.close()
                raise ServerDied(self._reason(exc)) from None
            raise
        except (anyio_closed_errors()) as exc:
            await self.close()
            raise ServerDied(self._reason(exc)) from None

    async def close(self) -> None:
        async with self._lock:
            await self._shutdown()

    async def _shutdown(self) -> None:
        task, self._task = self._task, None
        self.session = None
        if task is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), self.start_seconds)
        except asyncio.TimeoutError:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:  # it is being ended; _run keeps every other failure to itself
                pass


def _found(config: McpServerConfig) -> bool:
    """Whether a stdio server's command exists (the launcher would otherwise just exit)."""
    command = config.command or ""
    path = (config.env or {}).get("PATH") or os.environ.get("PATH")
    if os.sep not in command:
        return shutil.which(command, path=path) is not None
    return os.access(os.path.join(config.cwd or "", command), os.X_OK)


def anyio_closed_errors() -> tuple[type[BaseException], ...]:
    import anyio

    return (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream, ConnectionError)
