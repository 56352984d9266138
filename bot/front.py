"""The front door of a multi-worker bot: take Slack's requests and hand each to the worker owning its thread.

It does no thread work itself, so it answers within a forwarding hop. HTTP mode checks Slack's
signature and 5-minute window (slack_sdk's SignatureVerifier) before anything else; Socket Mode
trusts its authenticated websocket. Either way the request goes on to its worker (shards.py) as an
HTTP request signed with the pool's own secret, and the worker's answer (the ack, with a modal's
`response_action` when there is one) goes back to Slack unchanged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import web
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse
from slack_sdk.web.async_client import AsyncWebClient

from core.llm import LLMSettings

from .app import EVENTS_PATH, events_app, serve_web
from .config import BotConfig
from .pool import WorkerPool
from .shards import parse_body, route

log = logging.getLogger(__name__)

ACK_BUDGET = 2.5  # seconds: Slack gives up on an ack after 3
EVENT_PATIENCE = 60.0  # seconds an acked event waits for its worker to (re)start, per attempt
EVENT_ATTEMPTS = 3
DRAIN_TIMEOUT = 10.0  # seconds shutdown waits for queued events to reach their workers
MAX_QUEUED = 10_000  # requests waiting for one worker; beyond that Slack is told to retry later
WORKER_TIMEOUT = aiohttp.ClientTimeout(total=30)
UNAVAILABLE = (503, b"", "text/plain")  # Slack retries an event later; a click shows an error
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


class ShardedBot:
    """`workers: N` (N > 1): this process holds the Slack connection, N worker processes do the work."""

    def __init__(self, config: BotConfig, *, llm_settings: LLMSettings | None = None) -> None:
        self.config = config
        self.pool = WorkerPool(config, llm_settings=llm_settings)
        self._signer = SignatureVerifier(self.pool.secret)
        secret = config.slack.signing_secret
        self._verifier = SignatureVerifier(secret.get_secret_value()) if secret else None
        self._lanes: list[_WorkerLane] = []
        self._runner: web.AppRunner | None = None
        self._socket: SocketModeClient | None = None

    async def _start_pool(self) -> None:
        await self.pool.start()
        self._lanes = [_WorkerLane(i, self.pool, self._signer) for i in range(self.pool.count)]

    # ---- forwarding ---------------------------------------------------------------

    async def forward(
        self, body: bytes, content_type: str, retry: dict[str, str], payload: dict[str, Any] | None = None
    ) -> tuple[int, bytes, str]:
        """Hand one Slack request to its worker; (status, body, content type) to answer Slack with.

        Events need nothing from the worker but a 200, so they are acked here at once and
        delivered in the background (in arrival order, and again if the worker restarts).
        Everything else (clicks, modal submissions, url_verification) waits for the worker's ack.
        """
        if payload is None:
            payload = parse_body(body, content_type)
        lane = self._lanes[route(payload, self.pool.count)]
        request = _Forward(body, content_type, retry)
        if payload is not None and payload.get("type") == "event_callback":
            return (200, b"", "text/plain") if lane.put(request) else UNAVAILABLE
        request.answer = asyncio.get_running_loop().create_future()
        if not lane.put(request):
            return UNAVAILABLE
        try:
            return await asyncio.wait_for(asyncio.shield(request.answer), ACK_BUDGET)
        except TimeoutError:
            request.answer.cancel()  # too late for Slack's ack: the worker never sees it
            return UNAVAILABLE

    # ---- HTTP mode ----------------------------------------------------------------

    def web_app(self) -> web.Application:
        return events_app(self._handle_http, self._health)

    async def _handle_http(self, request: web.Request) -> web.Response:
        body = await request.read()
        if not self._signed(body, request.headers):
            return web.Response(status=401, text="invalid request")
        retry = {k: v for k, v in request.headers.items() if k.lower().startswith("x-slack-retry")}
        status, answer, content_type = await self.forward(body, request.content_type or JSON, retry)
        return web.Response(status=status, body=answer, content_type=content_type or None)

    def _signed(self, body: bytes, headers: Any) -> bool:
        if self._verifier is None:
            return False
        try:
            return self._verifier.is_valid_request(body, dict(headers))
        except ValueError:  # a timestamp header that is not a number
            return False

    async def _health(self, request: web.Request) -> web.Response:
        pids = self.pool.pids()
        return web.json_response({"ok": all(pids), "workers": len(pids), "serving": sum(1 for p in pids if p)})

    async def start_http(self, host: str = "0.0.0.0", port: int = 3000) -> int:
        await self._start_pool()
        self._runner = runner = await serve_web(self.web_app(), lambda r: web.TCPSite(r, host, port))
        bound = int(runner.addresses[0][1])
        log.info(
            "listening for Slack events",
            extra={"mode": "http", "port": bound, "path": EVENTS_PATH, "workers": self.pool.count},
        )
        return bound

    # ---- Socket Mode --------------------------------------------------------------

    async def start_socket(self) -> None:
        app_token = self.config.slack.app_token
        if app_token is None:
            raise RuntimeError("Socket Mode needs SLACK_APP_TOKEN")
        await self._start_pool()
        token = self.config.slack.bot_token
        web_client = AsyncWebClient(token=token.get_secret_value() if token else None, base_url=self.config.slack.api_url)
        self._socket = SocketModeClient(app_token.get_secret_value(), web_client=web_client)
        self._socket.socket_mode_request_listeners.append(self._on_socket_request)
        await self._socket.connect()
        log.info("connected to Slack", extra={"mode": "socket", "workers": self.pool.count})

    async def _on_socket_request(self, client: SocketModeClient, req: SocketModeRequest) -> None:
        if req.type == "events_api":
            body, content_type = json.dumps(req.payload).encode(), JSON
        elif req.type == "interactive":
            body, content_type = urlencode({"payload": json.dumps(req.payload)}).encode(), FORM
        else:  # slash commands are not part of this app (see manifest.yml); ack so Slack stops resending
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        retry = {"X-Slack-Retry-Num": str(req.retry_attempt)} if req.retry_attempt else {}
        status, answer, answer_type = await self.forward(body, content_type, retry, req.payload)
        if status != 200:
            return  # no ack: Slack redelivers the envelope
        payload: dict[str, Any] | None = None
        if answer and answer_type.startswith(JSON):
            payload = json.loads(answer)
        elif answer:
            payload = {"text": answer.decode("utf-8", "replace")}
        await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id, payload=payload))

    # ---- lifecycle ----------------------------------------------------------------

    async def close(self) -> None:
        """Stop taking requests, let each worker finish its in-flight turns, release everything."""
        if self._socket is not None:
            await self._socket.disconnect()
        if self._runner is not None:
            await self._runner.shutdown()
        await asyncio.gather(*(lane.drain(DRAIN_TIMEOUT) for lane in self._lanes))
        await self.pool.close()
        if self._socket is not None:
            await self._socket.close()
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for lane in self._lanes:
            await lane.close()
        self._lanes = []


class _Forward:
    """One Slack request on its way to a worker; `answer` is set when Slack waits for the worker's ack."""

    def __init__(self, body: bytes, content_type: str, retry: dict[str, str]) -> None:
        self.body, self.content_type, self.retry = body, content_type, retry
        self.answer: asyncio.Future[tuple[int, bytes, str]] | None = None


class _WorkerLane:
    """Requests for one worker, sent one at a time so the worker sees them in arrival order."""

    def __init__(self, index: int, pool: WorkerPool, signer: SignatureVerifier) -> None:
        self.index, self.pool, self.signer = index, pool, signer
        self.queue: asyncio.Queue[_Forward] = asyncio.Queue(MAX_QUEUED)
        self.session = aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=pool.socket_path(index)))
        self.task = asyncio.create_task(self._run(), name=f"forward-{index}")

    def put(self, request: _Forward) -> bool:
        try:
            self.queue.put_nowait(request)
        except asyncio.QueueFull:
            log.error("worker queue full; refusing the request", extra={"worker": self.index})
            return False
        return True

    async def _run(self) -> None:
        while True:
            request = await self.queue.get()
            try:
                if request.answer is None:
                    await self._deliver_event(request)
                elif not request.answer.done():
                    answer = await self._send(request) if await self.pool.ready(self.index, ACK_BUDGET) else None
                    if not request.answer.done():
                        request.answer.set_result(answer or UNAVAILABLE)
            except Exception:
                log.exception("forwarding failed", extra={"worker": self.index})
            finally:
                self.queue.task_done()

    async def _deliver_event(self, request: _Forward) -> None:
        """Already acked to Slack, so keep trying while the worker restarts (its dedupe drops repeats)."""
        generation = -1
        for _ in range(EVENT_ATTEMPTS):
            # After a failed send, wait for the worker's next start, not the one that just failed.
            if await self.pool.ready(self.index, EVENT_PATIENCE, newer_than=generation):
                generation = self.pool.generation(self.index)
                answer = await self._send(request)
                if answer is not None:
                    if answer[0] != 200:
                        log.warning("worker refused an event", extra={"worker": self.index, "status": answer[0]})
                    return
        log.error("event dropped: its worker did not take it", extra={"worker": self.index})

    async def drain(self, timeout: float) -> None:
        """Wait (up to `timeout` s) until every queued request has reached the worker."""
        try:
            await asyncio.wait_for(self.queue.join(), timeout)
        except TimeoutError:
            log.error("shutting down with requests undelivered", extra={"worker": self.index, "left": self.queue.qsize()})

    async def _send(self, request: _Forward) -> tuple[int, bytes, str] | None:
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": request.content_type,
            "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": self.signer.generate_signature(timestamp=timestamp, body=request.body) or "",
            **request.retry,
        }
        try:
            async with self.session.post(
                "http://worker" + EVENTS_PATH, data=request.body, headers=headers, timeout=WORKER_TIMEOUT
            ) as response:
                return response.status, await response.read(), response.content_type
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            log.warning("worker did not answer", extra={"worker": self.index, "error": type(exc).__name__})
            return None

    async def close(self) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.session.close()
