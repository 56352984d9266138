"""Shared lifecycle for the loopback aiohttp servers behind every fake."""

from __future__ import annotations

from types import TracebackType
from typing import Self

from aiohttp import web

LOOPBACK_HOST = "127.0.0.1"


class LoopbackServer:
    """An aiohttp app bound to 127.0.0.1 on an ephemeral port.

    Subclasses build the routes; this class owns start/stop so every fake is an
    async context manager and never collides with another test's port.
    """

    def __init__(self, *, port: int = 0) -> None:
        """`port`: 0 for an ephemeral one; a fixed one to come back where a client was pointed earlier."""
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._bind_port = port

    def _build_app(self) -> web.Application:
        """Return the aiohttp application serving this fake's routes."""
        raise NotImplementedError

    async def _before_stop(self) -> None:
        """Hook to close long-lived connections so shutdown never hangs."""

    async def start(self) -> Self:
        """Bind the server; idempotent so fixtures and `async with` can mix."""
        if self._runner is not None:
            return self
        runner = web.AppRunner(self._build_app(), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, LOOPBACK_HOST, self._bind_port)
        await site.start()
        self._runner = runner
        self._port = int(runner.addresses[0][1])
        return self

    async def stop(self) -> None:
        """Close open connections and release the port."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        await self._before_stop()
        await runner.cleanup()

    @property
    def started(self) -> bool:
        """True between start() and stop()."""
        return self._runner is not None

    @property
    def port(self) -> int:
        """The ephemeral port; only valid once started."""
        if self._port is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return self._port

    @property
    def url(self) -> str:
        """Origin of the server, without a trailing slash."""
        return f"http://{LOOPBACK_HOST}:{self.port}"

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
