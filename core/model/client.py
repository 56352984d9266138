"""LLMClient: one chat-completions call to any OpenAI-compatible endpoint, errors mapped to CrewError.

This module is what the rest of the runtime sees: settings, the reply, and a client whose work is
done by core.model.sdk over the official `openai` SDK. The SDK (about 18 MiB of a process's memory)
is imported with the first call, so a bot that has not talked to the model yet does not carry it.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import TYPE_CHECKING, Any

from ..base.errors import CrewError
from .api import CallWatcher, DeltaListener, LLMReply, LLMSettings, RetryListener, ToolCall
from .wire import MessageJSON, ToolSet

if TYPE_CHECKING:
    from .sdk import SdkCalls

__all__ = ["CallWatcher", "DeltaListener", "LLMClient", "LLMReply", "LLMSettings", "RetryListener", "ToolCall"]


class LLMClient:
    def __init__(self, settings: LLMSettings) -> None:
        if not settings.model:
            raise CrewError(
                "LLM_MODEL_MISSING",
                "No model is configured. Set CREWAGENT_MODEL to the model name your endpoint serves "
                "(and OPENAI_BASE_URL for a non-OpenAI endpoint).",
            )
        self.settings = settings
        self.model: str = settings.model
        self._sdk: SdkCalls | None = None
        self._first_call = asyncio.Lock()
        self.watchers: list[CallWatcher] = []  # usage, metrics, traces (see CallWatcher)

    async def _calls(self) -> SdkCalls:
        if self._sdk is None:
            # The openai SDK is imported with the first model call, in a worker thread: importing it
            # takes a few hundred ms of CPU, and the event loop keeps answering Slack meanwhile. The
            # client is built there too (~0.3 s: the SDK's lazy imports of its aiohttp transport, the CA
            # bundle loaded into an SSL context); none of it needs the loop, whose HTTP session opens
            # with the first request.
            async with self._first_call:  # calls made at once share the one client
                if self._sdk is None:
                    self._sdk = await asyncio.to_thread(_new_calls, self.settings)
        return self._sdk

    async def aclose(self) -> None:
        if self._sdk is not None:
            await self._sdk.aclose()

    async def complete(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | ToolSet | None = None,
        *,
        on_retry: RetryListener | None = None,
        message_json: MessageJSON | None = None,
        on_delta: DeltaListener | None = None,
        model: str | None = None,
    ) -> LLMReply:
        """One completion, streamed: `on_delta` hears each piece of assistant text as it arrives (and
        `restart=True` when an answer cut off mid-stream is asked for again; see core.model.completion_stream).
        Raises CrewError(LLM_*) once the SDK has used up its retries.

        When the same specs or messages go out with many calls, `tools` may be a ToolSet and
        `message_json` the conversation's MessageJSON (core.model.wire), so they are encoded once.
        `model` names another model the endpoint serves for this one call (a conversation's `*model`
        choice); None is the configured one.
        """
        calls = await self._calls()
        ends = [watch(model or self.model) for watch in self.watchers]
        try:
            reply = await calls.complete(
                messages, tools, on_retry=on_retry, message_json=message_json, on_delta=on_delta, model=model
            )
        except BaseException as exc:
            for ended in ends:
                ended(None, exc)
            raise
        for ended in ends:
            ended(reply, None)
        return reply


def _new_calls(settings: LLMSettings) -> SdkCalls:
    """The SDK's calls for these settings (imports the SDK on first use); runs in a worker thread."""
    sdk = importlib.import_module("crewagent.core.model.sdk")
    calls: SdkCalls = sdk.SdkCalls(settings)
    return calls
