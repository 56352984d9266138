"""The bot's Web API client: slack_sdk's AsyncWebClient, its own retry handlers, Retry-After kept
for every call of a method (not just the one that was answered 429), and what a failed call means.

Slack's rate limits are per method and workspace. slack_sdk's rate-limit handler waits out a 429's
Retry-After before asking again, but only for the call that got it: another call of the same method
(another thread's edit) would go out at once and be refused too. Here a 429 holds the method's gate
until Retry-After has passed; every call of that method, the retried one included, waits for it.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.web.async_slack_response import AsyncSlackResponse

# Retries inside one call, for blips; longer outages are the outbox's job (it retries for a day).
RATE_LIMIT_RETRIES = 3
SERVER_ERROR_RETRIES = 2
CONNECTION_RETRIES = 2
DEFAULT_RETRY_AFTER = 1.0  # seconds, when a 429 does not say


# What a Web API call may fail with: Slack's error answer, a failed file transfer, the network, a timeout.
SLACK_FAILURES = (SlackApiError, SlackRequestError, aiohttp.ClientError, TimeoutError)


def failure_code(exc: BaseException) -> str:
    """Slack's error code, or the kind of transport failure (for the log, never for the user)."""
    if isinstance(exc, SlackApiError):
        try:
            return str(exc.response.get("error") or f"http_{exc.response.status_code}")
        except (AttributeError, TypeError):  # an answer that is not JSON (a proxy's error page)
            return f"http_{getattr(exc.response, 'status_code', '?')}"
    return type(exc).__name__


# Slack error codes that mean "not now", whatever HTTP status they came with.
TRANSIENT_CODES = frozenset(
    {"ratelimited", "service_unavailable", "internal_error", "fatal_error", "request_timeout", "timeout"}
)


def transient_failure(exc: BaseException | str) -> bool:
    """True when a failure says Slack could not answer now (5xx, 429, a timeout, a dropped connection),
    not that the call can never work (`invalid_blocks`, `channel_not_found`, `missing_scope`, …)."""
    if isinstance(exc, str):
        return False
    if not isinstance(exc, SlackApiError):
        return True
    status = getattr(exc.response, "status_code", 200)
    return status >= 500 or status == 429 or failure_code(exc) in TRANSIENT_CODES


def retry_after(exc: BaseException) -> float:
    """Seconds a 429 asked us to wait (0 when it did not say)."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return max(0.0, float(headers.get("Retry-After", 0)))
    except (TypeError, ValueError):
        return 0.0


class RetryAfterGate:
    """Per Web API method: the monotonic time before which no call may go out."""

    def __init__(self) -> None:
        self._until: dict[str, float] = {}

    def hold(self, method: str, seconds: float) -> None:
        self._until[method] = max(self._until.get(method, 0.0), time.monotonic() + seconds)

    async def wait(self, method: str) -> None:
        while (left := self._until.get(method, 0.0) - time.monotonic()) > 0:
            await asyncio.sleep(left)  # a deadline, not a poll: Slack said how long
        self._until.pop(method, None)


def _method(request: HttpRequest) -> str:
    return request.url.rstrip("/").rsplit("/", 1)[-1]


def _retry_after(response: HttpResponse) -> float:
    for name, values in response.headers.items():
        if name.lower() == "retry-after" and values:
            try:
                return max(0.0, float(values[0]))
            except (TypeError, ValueError):
                break
    return DEFAULT_RETRY_AFTER


class GatedRateLimitRetryHandler(AsyncRateLimitErrorRetryHandler):
    """slack_sdk's 429 handler, waiting on the method's gate (so other calls of the method wait too)."""

    def __init__(self, gate: RetryAfterGate, max_retry_count: int = RATE_LIMIT_RETRIES) -> None:
        super().__init__(max_retry_count=max_retry_count)
        self.gate = gate

    async def prepare_for_next_attempt_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> None:
        if response is None:
            await super().prepare_for_next_attempt_async(state=state, request=request, response=response, error=error)
            return
        state.next_attempt_requested = True
        method = _method(request)
        self.gate.hold(method, _retry_after(response) + random.random() * 0.2)
        await self.gate.wait(method)
        state.increment_current_attempt()


# Calls that create something: asked again after a 5xx or a dropped connection, they may create it twice.
# Their retries are the outbox's, which first looks in the thread for what may already be there.
NOT_REPEATABLE = frozenset({"chat.postMessage", "chat.postEphemeral", "chat.startStream", "files.completeUploadExternal"})


class RepeatableServerErrorRetryHandler(AsyncServerErrorRetryHandler):
    """slack_sdk's 500/503 handler, for calls that may safely be made twice."""

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if _method(request) in NOT_REPEATABLE:
            return False
        return await super()._can_retry_async(state=state, request=request, response=response, error=error)


class RepeatableConnectionErrorRetryHandler(AsyncConnectionErrorRetryHandler):
    """slack_sdk's dropped-connection handler, for calls that may safely be made twice."""

    async def _can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        if _method(request) in NOT_REPEATABLE:
            return False
        return await super()._can_retry_async(state=state, request=request, response=response, error=error)


# Told a Web API call's method as it starts; what it returns hears the call end (None, or the error).
SlackCallWatcher = Callable[[str], Callable[[BaseException | None], None]]


class PacedWebClient(AsyncWebClient):
    """AsyncWebClient whose calls wait while their method is rate limited (see RetryAfterGate)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gate = RetryAfterGate()
        # Awaited before every call: a replica cut off from its database holds what its runs show
        # until it knows the threads are still its own (bot.replicas.handover).
        self.before_call: Callable[[], Awaitable[None]] | None = None
        self.call_watchers: list[SlackCallWatcher] = []  # metrics, traces: told of each call and how it ended
        attach_retry_handlers(self)

    async def api_call(self, api_method: str, **kwargs: Any) -> AsyncSlackResponse:  # type: ignore[override]
        if self.before_call is not None:
            await self.before_call()
        await self.gate.wait(api_method)
        ends = [watch(api_method) for watch in self.call_watchers]
        try:
            response = await super().api_call(api_method, **kwargs)
        except (SlackApiError, SlackRequestError, aiohttp.ClientError, TimeoutError) as exc:
            for ended in ends:
                ended(exc)
            raise
        for ended in ends:
            ended(None)
        return response


def attach_retry_handlers(client: AsyncWebClient) -> None:
    """slack_sdk's own handlers for 429 (waits Retry-After), 500/503 and reset connections (back-off; not
    for calls that would create something twice)."""
    gate = getattr(client, "gate", None)
    wanted: list[AsyncRetryHandler] = [
        GatedRateLimitRetryHandler(gate) if isinstance(gate, RetryAfterGate)
        else AsyncRateLimitErrorRetryHandler(max_retry_count=RATE_LIMIT_RETRIES),
        RepeatableServerErrorRetryHandler(max_retry_count=SERVER_ERROR_RETRIES),
        RepeatableConnectionErrorRetryHandler(max_retry_count=CONNECTION_RETRIES),
    ]
    kinds = (AsyncRateLimitErrorRetryHandler, AsyncServerErrorRetryHandler, AsyncConnectionErrorRetryHandler)
    client.retry_handlers[:] = [h for h in client.retry_handlers if not isinstance(h, kinds)] + wanted
