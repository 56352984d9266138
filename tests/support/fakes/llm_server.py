"""A scripted, OpenAI-compatible chat completions server on loopback.

Tests drive the real `openai.AsyncOpenAI` client against it, so retries,
timeouts and response parsing are the SDK's own, not a mock's. A request
with `"stream": true` is answered with server-sent chunks, as OpenAI does:
the text in small pieces, each tool call split across chunks, and the usage
in a last chunk of its own when `stream_options.include_usage` asks for it.
It can also play an endpoint that refuses `stream_options` or streaming (an
HTTP 400 before any script step is used) and a reply whose connection drops
after a number of chunks.

    async with ScriptedLLM() as llm:
        llm.add_reply(tool_calls=[("fs_read", {"path": "a.md"})])
        llm.add_reply(content="done")
        client = AsyncOpenAI(base_url=llm.base_url, api_key="test")
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from aiohttp import web

from ._server import LoopbackServer

ToolArguments: TypeAlias = Mapping[str, Any] | str
"""A dict is JSON-encoded; a str is sent verbatim (to test malformed JSON)."""

ToolCallSpec: TypeAlias = tuple[str, ToolArguments]


@dataclass(frozen=True)
class Reply:
    """One assistant turn: text, tool calls, or both."""

    content: str | None = None
    tool_calls: Sequence[ToolCallSpec] = ()
    finish_reason: str | None = None
    """Defaults to "tool_calls" when tool calls are present, else "stop"."""
    usage: Mapping[str, int] | None = None
    """Overrides the estimated token usage."""
    drop_after: int | None = None
    """When streamed, the connection is cut after this many chunks (the role chunk counts)."""


@dataclass(frozen=True)
class ErrorReply:
    """An HTTP error the SDK sees as an APIStatusError (and may retry)."""

    status: int = 500
    body: Mapping[str, Any] | str | bytes | None = None
    """A mapping is sent as JSON, a str becomes the OpenAI error message,
    bytes are sent raw (for non-JSON error pages)."""
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Delay:
    """Sleep before answering the next request (which consumes it)."""

    seconds: float


ReplyLike: TypeAlias = Reply | ErrorReply | str
"""What a responder may return; a bare str is a text reply."""

Responder: TypeAlias = Callable[[dict[str, Any]], ReplyLike | Awaitable[ReplyLike]]


@dataclass(frozen=True)
class _ResponderStep:
    responder: Responder


_Step: TypeAlias = Reply | ErrorReply | Delay | _ResponderStep

SCRIPT_EXHAUSTED = "script exhausted"


class ScriptedLLM(LoopbackServer):
    """Fake `POST /v1/chat/completions` answering from a per-test script.

    Script steps are consumed one per request, in order. When the script is
    empty the server falls back to `responder`, then `default_reply`, and
    otherwise fails loudly with a 500 "script exhausted" (marked not
    retryable so the SDK surfaces it at once).
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        default_reply: ReplyLike | None = None,
        responder: Responder | None = None,
        error_retry_after_ms: float | None = 1,
        piece_chars: int = 12,
        piece_interval: float = 0.0,
        rejects_stream_options: bool = False,
        rejects_stream: bool = False,
        rejection_status: int = 400,
    ) -> None:
        """`latency` delays every call (benchmarks); `error_retry_after_ms`
        is sent as `retry-after-ms` on scripted errors so SDK retries are fast
        (the SDK ignores `retry-after: 0` and would back off ~0.5s instead).
        A streamed reply sends its text `piece_chars` characters per chunk, `piece_interval`
        seconds apart (benchmarks measure what happens between the first piece and the last).
        `rejects_stream_options` / `rejects_stream` answer a request that carries `stream_options` /
        `"stream": true` with `rejection_status`, as endpoints that do not know them do."""
        super().__init__()
        self.rejects_stream_options = rejects_stream_options
        self.rejects_stream = rejects_stream
        self.rejection_status = rejection_status
        self.rejected: list[dict[str, Any]] = []
        """Request bodies refused for `stream_options` or `stream` (they use no script step)."""
        self.piece_chars = max(1, piece_chars)
        self.piece_interval = piece_interval
        self.first_piece_at: list[float] = []
        """time.monotonic() at which each streamed reply's first text piece was sent."""
        self.latency = latency
        self.default_reply = default_reply
        self.responder = responder
        self.error_retry_after_ms = error_retry_after_ms
        self.requests: list[dict[str, Any]] = []
        """Every request body received, in arrival order (errors included)."""
        self.exhausted: list[dict[str, Any]] = []
        """Request bodies that found the script empty."""
        self._script: deque[_Step] = deque()
        self._call_ids = itertools.count(1)
        self._completion_ids = itertools.count(1)
        self._arrivals = asyncio.Condition()
        self._in_flight: set[asyncio.Task[Any]] = set()

    # ---- scripting -------------------------------------------------------

    def add_reply(
        self,
        content: str | None = None,
        tool_calls: Sequence[ToolCallSpec] | None = None,
        *,
        finish_reason: str | None = None,
        usage: Mapping[str, int] | None = None,
        drop_after: int | None = None,
    ) -> None:
        """Queue an assistant turn; tool call arguments as dict or raw str. With `drop_after`, a streamed
        answer loses its connection after that many chunks."""
        self._script.append(
            Reply(
                content=content,
                tool_calls=tuple(tool_calls or ()),
                finish_reason=finish_reason,
                usage=usage,
                drop_after=drop_after,
            )
        )

    def add_error(
        self,
        status: int = 500,
        body: Mapping[str, Any] | str | bytes | None = None,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        """Queue an HTTP error; it carries `retry-after: 0` plus `retry-after-ms`
        (see `error_retry_after_ms`) so SDK retries are immediate."""
        self._script.append(ErrorReply(status=status, body=body, headers=dict(headers or {})))

    def add_delay(self, seconds: float) -> None:
        """Queue a pause taken before answering the next request."""
        self._script.append(Delay(seconds))

    def add_responder(self, responder: Responder) -> None:
        """Queue a one-shot dynamic step computed from the request body."""
        self._script.append(_ResponderStep(responder))

    @property
    def remaining(self) -> int:
        """Unconsumed scripted steps (delays included)."""
        return len(self._script)

    def assert_consumed(self) -> None:
        """Fail if steps are left over or any request hit an empty script."""
        problems: list[str] = []
        if self._script:
            problems.append(f"{len(self._script)} scripted step(s) never requested: {list(self._script)!r}")
        if self.exhausted:
            problems.append(f"{len(self.exhausted)} request(s) arrived after the script was exhausted")
        if problems:
            raise AssertionError("; ".join(problems))

    async def wait_for_requests(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Wait until at least `count` requests arrived; returns them all."""
        async with asyncio.timeout(timeout):
            async with self._arrivals:
                await self._arrivals.wait_for(lambda: len(self.requests) >= count)
        return list(self.requests)

    # ---- server ----------------------------------------------------------

    @property
    def base_url(self) -> str:
        """What to pass as `AsyncOpenAI(base_url=...)`."""
        return f"{self.url}/v1"

    def _build_app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_get("/v1/models", self._models)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}]}
        )

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            return _error_response(400, "request body is not valid JSON", "invalid_request_error")
        if not isinstance(body, dict):
            return _error_response(400, "request body must be a JSON object", "invalid_request_error")
        async with self._arrivals:
            self.requests.append(body)
            self._arrivals.notify_all()
        number = len(self.requests)
        refusal = self._refusal(body)
        if refusal is not None:
            self.rejected.append(body)
            return _error_response(self.rejection_status, refusal, "invalid_request_error")

        step, delay = self._take_step()
        if self.latency or delay:
            await self._sleep(self.latency + delay)
        if step is None:
            self.exhausted.append(body)
            return _error_response(
                500,
                f"ScriptedLLM {SCRIPT_EXHAUSTED}: no reply scripted for request #{number}",
                "script_exhausted",
                headers={"x-should-retry": "false"},
            )
        if isinstance(step, _ResponderStep):
            produced = step.responder(body)
            step = await produced if inspect.isawaitable(produced) else produced
        if isinstance(step, str):
            step = Reply(content=step)
        if isinstance(step, ErrorReply):
            return self._render_error(step)
        if isinstance(step, Reply):
            completion = self._render_reply(step, body, request_bytes=len(raw))
            if body.get("stream") is True:
                return await self._stream(request, completion, body, drop_after=step.drop_after)
            return web.json_response(completion)
        raise TypeError(f"responder returned unsupported value {step!r}")

    def _refusal(self, body: dict[str, Any]) -> str | None:
        """The error message of an endpoint that does not know a streaming option this request uses."""
        if self.rejects_stream and body.get("stream") is True:
            return "stream: streaming is not supported by this server"
        if self.rejects_stream_options and "stream_options" in body:
            return "Unrecognized request argument supplied: stream_options"
        return None

    async def _stream(
        self, request: web.Request, completion: dict[str, Any], body: dict[str, Any], *, drop_after: int | None
    ) -> web.StreamResponse:
        """The completion as `data:` chunks ending with `data: [DONE]`; with `drop_after`, the connection
        is closed after that many chunks instead, without ending the response."""
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        head = {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
        head["object"] = "chat.completion.chunk"
        sent = 0

        async def send(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
            nonlocal sent
            if drop_after is not None and sent >= drop_after:
                raise _Dropped
            chunk = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            chunk.update(extra)
            await response.write(f"data: {json.dumps(chunk)}\n\n".encode())
            sent += 1

        try:
            await self._send_chunks(send, response, head, completion, body)
        except _Dropped:
            assert request.transport is not None
            request.transport.close()  # mid-body: the client sees an incomplete chunked response
        return response

    async def _send_chunks(
        self,
        send: Callable[..., Awaitable[None]],
        response: web.StreamResponse,
        head: dict[str, Any],
        completion: dict[str, Any],
        body: dict[str, Any],
    ) -> None:
        choice = completion["choices"][0]
        message = choice["message"]

        await send({"role": "assistant", "content": ""})
        text = message.get("content") or ""
        for start in range(0, len(text), self.piece_chars):
            if start == 0:
                self.first_piece_at.append(time.monotonic())
            elif self.piece_interval:
                await self._sleep(self.piece_interval)
            await send({"content": text[start : start + self.piece_chars]})
        for index, call in enumerate(message.get("tool_calls") or ()):
            arguments = call["function"]["arguments"]
            half = len(arguments) // 2
            first = {"index": index, "id": call["id"], "type": "function"}
            first["function"] = {"name": call["function"]["name"], "arguments": arguments[:half]}
            await send({"tool_calls": [first]})
            await send({"tool_calls": [{"index": index, "function": {"arguments": arguments[half:]}}]})
        await send({}, choice["finish_reason"])
        if (body.get("stream_options") or {}).get("include_usage"):
            usage_chunk = {**head, "choices": [], "usage": completion["usage"]}
            await response.write(f"data: {json.dumps(usage_chunk)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()

    async def _sleep(self, seconds: float) -> None:
        """Sleep that stop() can cut short, so a slow step never delays teardown."""
        task = asyncio.current_task()
        assert task is not None
        self._in_flight.add(task)
        try:
            await asyncio.sleep(seconds)
        finally:
            self._in_flight.discard(task)

    async def _before_stop(self) -> None:
        for task in list(self._in_flight):
            task.cancel()

    def _take_step(self) -> tuple[Reply | ErrorReply | _ResponderStep | str | None, float]:
        """Pop leading delays plus one step, synchronously so concurrent
        requests never share a step."""
        delay = 0.0
        while self._script and isinstance(self._script[0], Delay):
            delay += self._script.popleft().seconds  # type: ignore[union-attr]
        if self._script:
            step = self._script.popleft()
            assert not isinstance(step, Delay)
            return step, delay
        if self.responder is not None:
            return _ResponderStep(self.responder), delay
        return self.default_reply, delay

    def _render_error(self, step: ErrorReply) -> web.Response:
        headers = {"retry-after": "0"}
        if self.error_retry_after_ms is not None:
            headers["retry-after-ms"] = str(self.error_retry_after_ms)
        headers.update(step.headers)
        if isinstance(step.body, bytes):
            return web.Response(status=step.status, body=step.body, headers=headers, content_type="text/plain")
        if isinstance(step.body, Mapping):
            return web.json_response(dict(step.body), status=step.status, headers=headers)
        kind = "rate_limit_exceeded" if step.status == 429 else "server_error"
        message = step.body if isinstance(step.body, str) else f"scripted {step.status} error"
        return _error_response(step.status, message, kind, headers=headers)

    def _render_reply(self, reply: Reply, request_body: dict[str, Any], *, request_bytes: int) -> dict[str, Any]:
        tool_calls = [
            {
                "id": f"call_{next(self._call_ids)}",
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(dict(args)),
                },
            }
            for name, args in reply.tool_calls
        ]
        message: dict[str, Any] = {"role": "assistant", "content": reply.content, "refusal": None}
        if tool_calls:
            message["tool_calls"] = tool_calls
        finish_reason = reply.finish_reason or ("tool_calls" if tool_calls else "stop")
        usage = dict(reply.usage) if reply.usage is not None else _estimate_usage(request_bytes, message)
        return {
            "id": f"chatcmpl-fake-{next(self._completion_ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": str(request_body.get("model") or "fake-model"),
            "system_fingerprint": None,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
            "usage": usage,
        }


class _Dropped(Exception):
    """A scripted reply's connection is cut here."""


def _estimate_usage(request_bytes: int, message: dict[str, Any]) -> dict[str, int]:
    """~4 chars per token: enough for code that budgets or reports tokens. The prompt is sized from
    the request as received (tool definitions count, as they do for a real model), not re-encoded."""
    prompt = max(1, request_bytes // 4)
    completion = max(1, len(json.dumps([message.get("content"), message.get("tool_calls")])) // 4)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _error_response(
    status: int, message: str, kind: str, *, headers: Mapping[str, str] | None = None
) -> web.Response:
    """OpenAI's error envelope, so the SDK's exception carries the message."""
    payload = {"error": {"message": message, "type": kind, "param": None, "code": kind}}
    return web.json_response(payload, status=status, headers=dict(headers or {}))
