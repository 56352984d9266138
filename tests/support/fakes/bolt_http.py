"""Serve a Bolt `AsyncApp` over real HTTP on loopback for signed-request tests."""

from __future__ import annotations

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp

from ._server import LoopbackServer


class BoltHTTPServer(LoopbackServer):
    """Runs `app` behind Bolt's aiohttp adapter, like a deployed bot.

    Bolt's own `app.server()` binds 0.0.0.0 on a fixed port; this binds an
    ephemeral loopback port so parallel tests never collide.
    """

    def __init__(self, app: AsyncApp, path: str = "/slack/events") -> None:
        super().__init__()
        self.app = app
        self.path = path

    @property
    def events_url(self) -> str:
        """Where Slack would POST events and interactions."""
        return f"{self.url}{self.path}"

    def _build_app(self) -> web.Application:
        web_app = web.Application()
        web_app.router.add_post(self.path, self._dispatch)
        return web_app

    async def _dispatch(self, request: web.Request) -> web.Response:
        bolt_response = await self.app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)
