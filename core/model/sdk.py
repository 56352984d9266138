"""The model calls of an LLMClient, over the official `openai` SDK, errors mapped to CrewError.

The SDK does the retrying (with backoff, honouring retry-after); we only watch its retries through
an httpx event hook so a surface can say "the model endpoint is slow, retrying".

The request goes out through the client's generic `post` (the SDK's documented way to call an
endpoint with a body it does not reshape) rather than `chat.completions.create`: `create` first
runs its TypedDict transform over every message and tool schema, which for a plain-JSON chat
request changes nothing but costs ~5-8 ms of event-loop CPU per call at twenty messages, more
than everything else a turn does. The body goes as ready JSON bytes (`content=`), built from parts
encoded once (core.model.wire), and the answer comes back as the raw response, validated in one
pass by pydantic (`ChatCompletion.model_validate_json`); only an answer that does not fit the
schema (servers that omit fields) takes the SDK's lenient `construct`. Sending, retries and
errors are still the SDK's.

The HTTP transport is the SDK's aiohttp one (`openai.DefaultAioHttpClient`), not its default httpx
pool: with a few hundred runs waiting on the model at once, the httpx pool re-examines every open
connection (probing each idle socket) whenever a request starts or ends, which cost more event-loop
CPU than the rest of a turn together; aiohttp's connector hands out a kept-alive connection in O(1).
"""

from __future__ import annotations

import contextvars
import itertools
import json
import logging
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx2
import openai
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from pydantic import ValidationError

from ..base.errors import CrewError
from .api import ASK_THE_OPERATOR, DeltaListener, LLMReply, LLMSettings, RetryListener, ToolCall, endpoint_name
from .completion_stream import StreamedCalls, StreamMode
from .wire import MessageJSON, ToolSet, request_body

log = logging.getLogger("crewagent.core.model.client")  # the model client's log, whichever module writes it

PLACEHOLDER_API_KEY = "not-needed"  # keyless local servers (Ollama, llama.cpp) still need a non-empty value

_retry_listener: contextvars.ContextVar[RetryListener | None] = contextvars.ContextVar("retry_listener", default=None)
_last_failure: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("last_failure", default=None)


class SdkCalls:
    def __init__(self, settings: LLMSettings) -> None:
        self.settings = settings
        self.model: str = settings.model or ""
        http_client = openai.DefaultAioHttpClient(
            limits=httpx2.Limits(max_connections=settings.max_connections),
            event_hooks={"request": [_on_request], "response": [_on_response]},
        )
        self._client = AsyncOpenAI(
            api_key=settings.api_key or PLACEHOLDER_API_KEY,
            base_url=settings.base_url,
            timeout=settings.timeout,
            max_retries=settings.max_retries,
            http_client=http_client,
        )
        self._calls = StreamedCalls(
            self._client,
            _completion,
            enabled=settings.stream,
            max_retries=settings.max_retries,
            endpoint=endpoint_name(settings.base_url),
        )

    async def aclose(self) -> None:
        await self._client.close()

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
        """See LLMClient.complete; an answer that cannot be read is asked for again (the SDK retries
        failed requests only)."""

        def body_for(mode: StreamMode) -> bytes:
            return request_body(
                model or self.model,
                messages,
                tools,
                self.settings.temperature,
                message_json,
                stream=mode.streams,
                stream_usage=mode.asks_usage,
            )

        for attempt in itertools.count(1):
            try:
                return self._parse(await self._fetch(body_for, on_retry, on_delta))
            except _MalformedAnswer as exc:
                # The SDK retries failed requests only; an answer it cannot read is retried here.
                if attempt > self.settings.max_retries:
                    log.warning("model call failed: malformed answer from %s (%s)",
                                endpoint_name(self.settings.base_url), exc)
                    raise CrewError(
                        "LLM_BAD_RESPONSE",
                        f"The model service sent a malformed answer ({exc}) {attempt} time(s).",
                    ) from None
                if on_retry is not None:
                    result = on_retry(attempt, f"malformed answer ({exc})")
                    if result is not None:
                        await result
        raise AssertionError("unreachable")

    async def _fetch(
        self, body_for: Callable[[StreamMode], bytes], on_retry: RetryListener | None, on_delta: DeltaListener | None
    ) -> Any:
        """One request (with the SDK's retries of failed ones, and the streaming step-downs): the answer."""
        token_listener = _retry_listener.set(on_retry)
        token_failure = _last_failure.set([])
        try:
            completion = await self._calls.complete(body_for, on_delta, on_retry)
        except openai.APIError as exc:
            raise self._map_error(exc) from None
        finally:
            _retry_listener.reset(token_listener)
            _last_failure.reset(token_failure)
        return completion

    # ---- mapping ----------------------------------------------------------

    def _parse(self, response: Any) -> LLMReply:
        try:
            return self._reply(response)
        except (ValidationError, AttributeError, TypeError) as exc:  # fields of the wrong type or shape
            raise _MalformedAnswer(f"unreadable fields: {type(exc).__name__}") from None

    def _reply(self, response: Any) -> LLMReply:
        choices = getattr(response, "choices", None)
        if not choices:
            raise _MalformedAnswer("no choices")
        choice = choices[0]
        message = _field(choice, "message")
        if isinstance(message, dict):  # an answer the SDK's model did not accept, built leniently
            try:
                message = ChatCompletionMessage.model_validate(message)
            except ValidationError:
                raise _MalformedAnswer("unreadable message") from None
        if not isinstance(message, ChatCompletionMessage):
            raise _MalformedAnswer("no message")  # e.g. "message": null
        calls: list[ToolCall] = []
        for call in message.tool_calls or []:
            function = getattr(call, "function", None)
            if function is None:
                continue  # non-function tool calls are not something this runtime offers
            calls.append(ToolCall(id=call.id, name=function.name, arguments=function.arguments or ""))
        usage = None
        counts = _field(response, "usage")
        if counts is not None:
            usage = {
                name: n if isinstance(n := _field(counts, name), int) else 0
                for name in ("prompt_tokens", "completion_tokens", "total_tokens")
            }
            details = _field(counts, "prompt_tokens_details")
            cached = _field(details, "cached_tokens") if details is not None else None
            if cached:
                usage["cached_tokens"] = cached
        extra: dict[str, Any] = {}
        reasoning = (message.model_extra or {}).get("reasoning_content")
        if reasoning:
            extra["reasoning_content"] = reasoning
        return LLMReply(
            content=message.content,
            tool_calls=calls,
            usage=usage,
            finish_reason=_field(choice, "finish_reason"),
            extra=extra,
        )

    def _map_error(self, exc: openai.APIError) -> CrewError:
        """What a user is told (no host, port or setting names); what an operator needs goes to the log."""
        error, operator_hint = self._describe_error(exc)
        if self.settings.operator_reads_errors and _operator_can_fix(error):
            error = CrewError(error.code, _for_operator(error, operator_hint), error.details)
        log.warning(
            "model call failed: %s",
            operator_hint,
            extra={"code": error.code, "endpoint": endpoint_name(self.settings.base_url), "model": self.model},
        )
        return error

    def _describe_error(self, exc: openai.APIError) -> tuple[CrewError, str]:
        where = endpoint_name(self.settings.base_url)
        tries = self.settings.attempts
        attempts = f"{tries} attempt{'s' if tries != 1 else ''}"
        if isinstance(exc, openai.APITimeoutError) and not _connection_failed(exc):
            return CrewError(
                "LLM_TIMEOUT",
                f"The model did not answer in time ({attempts} of {self.settings.timeout:g} s each).",
            ), f"{where} timed out; raise llm.timeout_seconds / CREWAGENT_LLM_TIMEOUT if the model is just slow"
        if isinstance(exc, openai.APIConnectionError):
            return CrewError(
                "LLM_HTTP_ERROR", f"The model service could not be reached ({attempts}).", {"status": None}
            ), f"could not connect to {where}; check OPENAI_BASE_URL and that the server is running"
        if isinstance(exc, openai.RateLimitError):
            return CrewError(
                "LLM_RATE_LIMITED",
                f"The model service is busy (rate limit) even after {attempts}. Wait a minute before trying again.",
                {"status": 429},
            ), f"{where} answered HTTP 429"
        if isinstance(exc, (openai.AuthenticationError, openai.PermissionDeniedError)):
            return CrewError(
                "LLM_AUTH_FAILED",
                f"The model service refused this bot's credentials. {ASK_THE_OPERATOR}",
                {"status": exc.status_code},
            ), f"{where} answered HTTP {exc.status_code}; check OPENAI_API_KEY"
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            detail = _short_detail(exc)
            if status == 404:
                message = f"The model service does not offer the configured model. {ASK_THE_OPERATOR}"
                hint = f"HTTP 404 from {where}; check that CREWAGENT_MODEL ('{self.model}') exists there"
            elif 400 <= status < 500:
                reason = f": {detail}." if detail else "."
                message = f"The model service rejected the request (HTTP {status}){reason}"
                hint = f"HTTP {status} from {where}: {detail}"
            else:
                message = f"The model service kept failing (HTTP {status}, {attempts})."
                hint = f"HTTP {status} from {where}; check OPENAI_BASE_URL"
            return CrewError("LLM_HTTP_ERROR", message, {"status": status}), hint
        return CrewError(
            "LLM_BAD_RESPONSE", "The model service sent an answer this bot cannot read."
        ), f"unreadable response from {where}: {type(exc).__name__}"


def _operator_can_fix(error: CrewError) -> bool:
    """Failures a setting explains (credentials, model name, address, time limit); not a refused request."""
    status = error.details.get("status")
    return error.code in ("LLM_AUTH_FAILED", "LLM_TIMEOUT") or (
        error.code == "LLM_HTTP_ERROR" and (status is None or status == 404 or status >= 500)
    )


def _for_operator(error: CrewError, operator_hint: str) -> str:
    """The terminal's wording: what failed and which setting to check, instead of "tell whoever runs the bot"."""
    message = error.message.replace(f" {ASK_THE_OPERATOR}", "").replace("this bot's credentials", "the credentials")
    return f"{message} {operator_hint[:1].upper()}{operator_hint[1:]}."


class _MalformedAnswer(Exception):
    """A 200 answer without a readable message; retried like a failed request."""


def _field(obj: Any, name: str) -> Any:
    """An attribute of an SDK object, or a key of the plain dict a lenient parse left in its place."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _completion(content: bytes) -> Any:
    """The answer as a ChatCompletion; leniently built, like the SDK does, when it misses fields.

    Anything that is not a JSON object comes back as is (and reads as an answer without choices).
    """
    try:
        return ChatCompletion.model_validate_json(content)
    except ValidationError:
        pass
    try:
        data = json.loads(content)
    except ValueError:
        return None
    return ChatCompletion.construct(**data) if isinstance(data, dict) else data


def _connection_failed(exc: BaseException) -> bool:
    """The aiohttp transport reports a refused or dropped connection as a timeout; its cause says which."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, aiohttp.ClientConnectionError) and not isinstance(cause, TimeoutError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _short_detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    message = ""
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            message = str(inner.get("message") or "")
        elif isinstance(body.get("message"), str):
            message = body["message"]
    message = " ".join(message.split())
    return message[:200]


async def _on_response(response: Any) -> None:
    failures = _last_failure.get()
    if failures is not None and response.status_code >= 400:
        failures.append(f"HTTP {response.status_code}")


async def _on_request(request: Any) -> None:
    """Runs inside the SDK's task for each attempt; a retry count > 0 means the last attempt failed."""
    listener = _retry_listener.get()
    if listener is None:
        return
    try:
        attempt = int(request.headers.get("x-stainless-retry-count", "0"))
    except ValueError:
        return
    if attempt <= 0:
        return
    failures = _last_failure.get() or []
    reason = failures[-1] if len(failures) >= attempt else "connection failed or timed out"
    result = listener(attempt, reason)
    if result is not None:
        await result
