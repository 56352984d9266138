"""A fake Slack Socket Mode websocket endpoint.

`FakeSlack` mounts one at `/link/` and hands its URL out from
`apps.connections.open`, so slack_sdk's real Socket Mode client (and Bolt's
`AsyncSocketModeHandler`) connect to it exactly as they would to Slack.
It can also run standalone: `async with SocketModeServer() as sm`.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

from aiohttp import WSMsgType, web

from ._server import LoopbackServer

LINK_PATH = "/link/"

# Interactive payload types for which Slack lets the ack carry a response body.
_RESPONSE_PAYLOAD_INTERACTIONS = frozenset({"view_submission", "block_suggestion", "view_closed"})


class SocketModeServer(LoopbackServer):
    """Sends envelopes to connected clients and collects their acks."""

    def __init__(self, *, app_id: str = "A1") -> None:
        super().__init__()
        self.app_id = app_id
        self.received: list[dict[str, Any]] = []
        """Every JSON text frame a client sent (acks included)."""
        self.acks: dict[str, dict[str, Any]] = {}
        """Ack messages by envelope_id."""
        self.connection_count = 0
        """Connections accepted so far (reconnects increase it)."""
        self._mounted_origin: str | None = None
        self._sockets: list[web.WebSocketResponse] = []
        self._pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._changed = asyncio.Condition()

    # ---- wiring ----------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application()
        self.install(app)
        return app

    def install(self, app: web.Application) -> None:
        """Add the websocket route to another fake's aiohttp app."""
        app.router.add_get(LINK_PATH, self._handle)

    def bind_origin(self, origin: str | None) -> None:
        """Serve under another server's origin (used when mounted)."""
        self._mounted_origin = origin

    @property
    def ws_url(self) -> str:
        """Base websocket URL of the endpoint."""
        origin = self._mounted_origin or self.url
        return origin.replace("http://", "ws://", 1) + LINK_PATH

    def issue_url(self) -> str:
        """A fresh connection URL, shaped like Slack's (ticket + app_id)."""
        return f"{self.ws_url}?ticket={uuid.uuid4()}&app_id={self.app_id}"

    async def _before_stop(self) -> None:
        await self.close_connections()

    # ---- test API --------------------------------------------------------

    @property
    def connected(self) -> bool:
        """True while at least one client socket is open."""
        return any(not ws.closed for ws in self._sockets)

    async def wait_connected(self, timeout: float = 30.0) -> None:
        """Wait until a client has connected and been greeted."""
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: self.connected)

    async def wait_connections(self, count: int, timeout: float = 5.0) -> None:
        """Wait until `count` client sockets are open at once (one app, several connections)."""
        async with asyncio.timeout(timeout):
            async with self._changed:
                await self._changed.wait_for(lambda: sum(not ws.closed for ws in self._sockets) >= count)

    async def send_envelope(
        self,
        type: str,
        payload: dict[str, Any],
        *,
        via: int | None = None,
        envelope_id: str | None = None,
        accepts_response_payload: bool | None = None,
        retry_attempt: int = 0,
        retry_reason: str = "",
        timeout: float = 30.0,
    ) -> str:
        """Send `payload` wrapped like Slack does; returns the envelope_id.

        `type` is "events_api", "interactive" or "slash_commands". Waits up to
        `timeout` for a client when none is connected yet. `via` picks the open
        connection by its connecting order (default: the newest), as Slack spreads
        an app's events over its connections.
        """
        await self.wait_connected(timeout)
        envelope_id = envelope_id or str(uuid.uuid4())
        if accepts_response_payload is None:
            accepts_response_payload = type == "slash_commands" or (
                type == "interactive" and payload.get("type") in _RESPONSE_PAYLOAD_INTERACTIONS
            )
        envelope: dict[str, Any] = {
            "envelope_id": envelope_id,
            "payload": payload,
            "type": type,
            "accepts_response_payload": accepts_response_payload,
        }
        if type == "events_api":
            envelope["retry_attempt"] = retry_attempt
            envelope["retry_reason"] = retry_reason
        self._pending.setdefault(envelope_id, asyncio.get_running_loop().create_future())
        socket = self._latest_socket() if via is None else [ws for ws in self._sockets if not ws.closed][via]
        await socket.send_str(json.dumps(envelope))
        return envelope_id

    async def wait_ack(self, envelope_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """The client's ack for `envelope_id` (`{"envelope_id": ..., "payload"?: ...}`)."""
        if envelope_id in self.acks:
            return self.acks[envelope_id]
        future = self._pending.setdefault(envelope_id, asyncio.get_running_loop().create_future())
        async with asyncio.timeout(timeout):
            return await asyncio.shield(future)

    async def send_disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the client to reconnect, as Slack does every few hours."""
        message = {"type": "disconnect", "reason": reason, "debug_info": {"host": "fake-applink"}}
        await self._latest_socket().send_str(json.dumps(message))

    async def close_connections(self) -> None:
        """Close every client socket (the client may then reconnect)."""
        for ws in list(self._sockets):
            if not ws.closed:
                await ws.close(code=1001, message=b"server shutdown")

    # ---- internals -------------------------------------------------------

    def _latest_socket(self) -> web.WebSocketResponse:
        for ws in reversed(self._sockets):
            if not ws.closed:
                return ws
        raise ConnectionError("no Socket Mode client is connected")

    async def _handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connection_count += 1
        await ws.send_str(
            json.dumps(
                {
                    "type": "hello",
                    "num_connections": 1,
                    "debug_info": {"host": "fake-applink", "approximate_connection_time": 18060},
                    "connection_info": {"app_id": self.app_id},
                }
            )
        )
        async with self._changed:
            self._sockets.append(ws)
            self._changed.notify_all()
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._on_text(message.data)
        finally:
            async with self._changed:
                self._sockets.remove(ws)
                self._changed.notify_all()
        return ws

    def _on_text(self, data: str) -> None:
        try:
            message = json.loads(data)
        except ValueError:
            return
        if not isinstance(message, dict):
            return
        self.received.append(message)
        envelope_id = message.get("envelope_id")
        if isinstance(envelope_id, str):
            self.acks[envelope_id] = message
            future = self._pending.get(envelope_id)
            if future is not None and not future.done():
                future.set_result(message)
