"""Reading a streamed chat completion: text deltas go to a listener as they arrive, the whole answer is
assembled by the SDK's own accumulator (`ChatCompletionStreamState`), tool-call fragments included.

An endpoint that ignores `stream: true` and answers with one JSON body is read as before.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

import httpx2
from openai import AsyncOpenAI, AsyncStream
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

DeltaListener = Callable[[str], Awaitable[None] | None]

SSE_TYPE = "text/event-stream"


def is_event_stream(response: httpx2.Response) -> bool:
    return response.headers.get("content-type", "").split(";")[0].strip().lower() == SSE_TYPE


async def read_event_stream(
    client: AsyncOpenAI, response: httpx2.Response, on_delta: DeltaListener | None
) -> Any | None:
    """The completion the chunks add up to (None if the stream held none); `on_delta` hears each text piece."""
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    seen = False
    stream: AsyncStream[ChatCompletionChunk] = AsyncStream(cast_to=ChatCompletionChunk, response=response, client=client)
    async for chunk in stream:
        if getattr(chunk, "object", "chat.completion.chunk") not in ("chat.completion.chunk", None):
            continue  # e.g. a provider's filter notice between chunks
        state.handle_chunk(chunk)
        seen = True
        if on_delta is None:
            continue
        for choice in chunk.choices or ():
            text = choice.delta.content if choice.index == 0 and choice.delta is not None else None
            if text:
                result = on_delta(text)
                if inspect.isawaitable(result):
                    await result
    return state.current_completion_snapshot if seen else None
