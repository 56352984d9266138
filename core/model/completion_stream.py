"""Streamed chat completions that survive endpoints which stream badly or not at all.

Text deltas go to a listener as they arrive; the whole answer is assembled from the plain chunks
with the SDK's own `accumulate_delta`, tool-call fragments included, and validated once. An endpoint that ignores
`stream: true` and answers with one JSON body is read as before.

Some OpenAI-compatible servers refuse `stream_options` or streaming altogether with an HTTP 400/422
that names the field. On such a refusal the same request is sent again without `stream_options` (the
reply then carries no usage, which the engine estimates), then without streaming; a step down that
gets an answer is kept for the rest of the client's life and logged once. Any other 400/422 (a prompt
too long, a bad tool schema) is the request's own fault and is reported at once.

A connection lost while the answer streams is not retried by the SDK (it only retries the request).
Here it is sent again after the SDK's own back-off, up to the client's retry count. When text of the
lost answer had already reached the listener, it is told first with `restart=True`, so a surface can
drop or close what it showed before the new answer's pieces come.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from enum import Enum
from functools import partial
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI
from openai._httpx2 import request_exceptions, timeout_exceptions
from openai._models import FinalRequestOptions
from openai.lib.streaming._deltas import accumulate_delta
from openai.types.chat import ChatCompletion
from pydantic import ValidationError

from .api import DeltaListener, RetryListener

log = logging.getLogger(__name__)

SSE_TYPE = "text/event-stream"
REFUSED = (400, 422)  # what servers answer to a request field or mode they do not support
CONNECTION_LOST = "connection lost while the answer streamed"
COMPLETIONS_PATH = "/chat/completions"


class StreamMode(Enum):
    """How much streaming a request asks for, from most to least."""

    WITH_USAGE = "streamed, usage in a last chunk"
    WITHOUT_USAGE = "streamed, no usage chunk"
    OFF = "not streamed"

    @property
    def streams(self) -> bool:
        return self is not StreamMode.OFF

    @property
    def asks_usage(self) -> bool:
        return self is StreamMode.WITH_USAGE

    def lower(self) -> StreamMode | None:
        order = list(StreamMode)
        at = order.index(self)
        return order[at + 1] if at + 1 < len(order) else None

    def below(self, other: StreamMode) -> bool:
        order = list(StreamMode)
        return order.index(self) > order.index(other)


BodyFor = Callable[[StreamMode], bytes]


class StreamedCalls:
    """One client's chat-completion calls, streamed as far as its endpoint allows."""

    def __init__(
        self,
        client: AsyncOpenAI,
        read_body: Callable[[bytes], Any],
        *,
        enabled: bool,
        max_retries: int,
        endpoint: str,
    ) -> None:
        """`read_body` reads the answer of an endpoint that sent one JSON body instead of a stream."""
        self.client = client
        self.read_body = read_body
        self.mode = StreamMode.WITH_USAGE if enabled else StreamMode.OFF
        self.max_retries = max_retries
        self.endpoint = endpoint  # for the log only
        # The options every call sends, built once: what `client.post` would build per call (the
        # SDK's option model with its defaults deep-copied, the path parsed and merged with the base
        # URL twice) cost about a tenth of a call's CPU. The absolute URL is the SDK's own merge.
        self._options = FinalRequestOptions.construct(method="post", url=str(client._prepare_url(COMPLETIONS_PATH)))

    async def complete(
        self, body_for: BodyFor, on_delta: DeltaListener | None, on_retry: RetryListener | None
    ) -> Any | None:
        """The completion (None if the endpoint sent nothing readable). Raises openai.APIError."""
        lost = 0
        while True:
            heard = False

            async def listen(text: str, on_delta: DeltaListener) -> None:
                nonlocal heard
                heard = True
                await _call(on_delta(text))

            try:
                return await self._attempt(body_for, partial(listen, on_delta=on_delta) if on_delta else None)
            except _ConnectionLost as exc:
                if lost >= self.max_retries:
                    raise exc.error from None
                lost += 1
                log.info("model answer cut off; sending the request again (%d of %d)", lost, self.max_retries)
                if heard and on_delta is not None:
                    await _call(on_delta("", restart=True))
                if on_retry is not None:
                    await _call(on_retry(lost, CONNECTION_LOST))
                await asyncio.sleep(self._back_off(lost))

    async def _attempt(self, body_for: BodyFor, on_text: Callable[[str], Awaitable[None]] | None) -> Any | None:
        raw = await self._send(body_for)
        try:
            if is_event_stream(raw):
                return await read_event_stream(self.client, raw, on_text)
            return self.read_body(await raw.aread())  # an endpoint that does not stream answers with one body
        except (openai.APIConnectionError, httpx2.TransportError) as exc:
            error = exc if isinstance(exc, openai.APIError) else openai.APIConnectionError(request=raw.request)
            raise _ConnectionLost(error) from exc
        finally:
            await raw.aclose()

    async def _send(self, body_for: BodyFor) -> httpx2.Response:
        """The response to the request, stepping down the stream mode while the endpoint refuses it."""
        mode = self.mode
        while True:
            try:
                options = self._options.model_copy(update={"content": body_for(mode)})
                raw = await self.client.request(httpx2.Response, options, stream=True)
            except openai.APIStatusError as exc:
                lower = mode.lower()
                if lower is None or not _refuses_streaming(exc):
                    raise
                mode = lower
                continue
            if mode.below(self.mode):  # a call that began before another stepped down never steps back up
                self._step_down(mode)
            return raw

    def _step_down(self, mode: StreamMode) -> None:
        self.mode = mode
        log.warning(
            "the model endpoint %s refused %s; its calls are %s from now on%s",
            self.endpoint,
            "streaming" if mode is StreamMode.OFF else "stream_options",
            mode.value,
            " (token usage is estimated)" if mode is StreamMode.WITHOUT_USAGE else "",
        )

    def _back_off(self, retry: int) -> float:
        """The SDK's own delay before its `retry`-th retry (exponential, jittered, capped)."""
        return self.client._calculate_retry_timeout(self.max_retries - retry + 1, self._options, None)


class _ConnectionLost(Exception):
    def __init__(self, error: openai.APIError) -> None:
        super().__init__(str(error))
        self.error = error


def _refuses_streaming(exc: openai.APIStatusError) -> bool:
    """A 400/422 whose error names `stream` or `stream_options` (servers name the field they do not
    know: "Unrecognized request argument supplied: stream_options", a validation error's `loc`...)."""
    if exc.status_code not in REFUSED:
        return False
    body = exc.body if isinstance(exc.body, str) else json.dumps(exc.body, default=str)
    return "stream" in f"{exc.message} {body}".lower()


async def _call(result: Awaitable[None] | None) -> None:
    if inspect.isawaitable(result):
        await result


def is_event_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").split(";")[0].strip().lower() == SSE_TYPE


async def read_event_stream(
    client: AsyncOpenAI, response: httpx2.Response, on_delta: Callable[[str], Awaitable[None]] | None
) -> Any | None:
    """The completion the chunks add up to (None if the stream held none); `on_delta` hears each text piece.

    The SDK's own pieces read the stream: its SSE decoder, its error check, and its `accumulate_delta`
    merging each chunk into the answer (tool-call fragments by index). The chunks stay plain JSON
    until the end, and the whole answer is validated once: building a typed chunk and re-copying the
    answer for every chunk (what `AsyncStream` + `ChatCompletionStreamState` do) cost ~0.17 ms per
    chunk, most of a streamed call's CPU.
    """
    snapshot: dict[str, Any] | None = None
    async for data in _chunks(client, response):
        if data.get("object", "chat.completion.chunk") not in ("chat.completion.chunk", None):
            continue  # e.g. a provider's filter notice between chunks
        choices = data.pop("choices", None) or []
        if snapshot is None:
            snapshot = {"system_fingerprint": None, **data, "object": "chat.completion", "choices": []}
            snapshot.pop("obfuscation", None)
        elif data.get("usage") is not None:
            snapshot["usage"] = data["usage"]
        text = None
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            delta = choice.get("delta") or {}
            have = snapshot["choices"]
            while len(have) <= index:
                have.append({"index": len(have), "finish_reason": None, "logprobs": None, "message": {}})
            entry = have[index]
            accumulate_delta(entry["message"], delta)
            for key in ("finish_reason", "logprobs"):
                if choice.get(key) is not None:
                    entry[key] = choice[key]
            if index == 0 and isinstance(delta.get("content"), str):
                text = delta["content"]
        if text and on_delta is not None:
            await on_delta(text)
    if snapshot is None:
        return None
    for entry in snapshot["choices"]:
        entry["message"].setdefault("role", "assistant")
    try:
        return ChatCompletion.model_validate(snapshot)
    except ValidationError:  # a server that leaves out fields: read leniently, as for a whole answer
        return ChatCompletion.construct(**snapshot)


async def _chunks(client: AsyncOpenAI, response: httpx2.Response) -> AsyncIterator[dict[str, Any]]:
    """Each event's JSON, until [DONE]; transport failures and error events raised as the SDK raises them.

    Both generators under it are closed here once the stream is read: left to the garbage collector,
    each one a turn stops at [DONE] costs the event loop a wake-up and a task of its own to close it."""
    body = response.aiter_bytes()
    events = client._make_sse_decoder().aiter_bytes(body)
    try:
        async for sse in events:
            if sse.data.startswith("[DONE]"):
                break
            data = sse.json()
            if not isinstance(data, dict):
                continue
            if data.get("error"):
                error = data["error"]
                message = error.get("message") if isinstance(error, dict) else None
                raise openai.APIError(
                    message=message if isinstance(message, str) and message else "An error occurred during streaming",
                    request=response.request,
                    body=error,
                )
            yield data
    except timeout_exceptions() as err:
        raise openai.APITimeoutError(request=response.request) from err
    except request_exceptions() as err:
        raise openai.APIConnectionError(request=response.request) from err
    finally:
        await events.aclose()
        await body.aclose()
