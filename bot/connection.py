"""Reaching Slack at start-up: both tokens checked, network failures retried with growing back-off.

A token Slack refuses never starts working by retrying, so it ends start-up (`TokenRefused`) with
which token it was and where to get a new one. A network failure (Slack unreachable, DNS, a 5xx,
rate limiting) is retried with growing back-off, one short log line per attempt, and /healthz says
"not connected" meanwhile. Socket Mode itself stays slack_sdk's: we ask Slack for the websocket URL
(`apps.connections.open`, the call that checks SLACK_APP_TOKEN) and hand it to the SDK's client,
which connects, answers pings and reconnects from then on. A URL is good for a short while only
(FRESH_URL_SECONDS is what we rely on).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import aiohttp
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

T = TypeVar("T")
TokenName = Literal["SLACK_BOT_TOKEN", "SLACK_APP_TOKEN"]

# Slack's answers meaning "this token will not work": retrying cannot help.
REFUSED = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "token_revoked",
        "token_expired",
        "account_inactive",
        "not_allowed_token_type",
        "invalid_token",
        "missing_scope",
        "no_permission",
        "team_access_not_granted",
        "org_login_required",
        "ekm_access_denied",
    }
)

FRESH_URL_SECONDS = 10.0
ATTEMPT_TIMEOUT = 15.0  # seconds one call may take before it counts as a network failure

WHERE_TO_GET = {
    "SLACK_BOT_TOKEN": "copy the Bot User OAuth Token (xoxb-…) from your app's page at https://api.slack.com/apps "
    "→ OAuth & Permissions (reinstall the app if it was removed)",
    "SLACK_APP_TOKEN": "create an app-level token (xapp-…, scope connections:write) on your app's page at "
    "https://api.slack.com/apps → Basic Information → App-Level Tokens",
}


class TokenRefused(Exception):
    """Slack refused a token: start-up cannot succeed until the operator replaces it."""

    def __init__(self, variable: TokenName, error: str) -> None:
        super().__init__(f"{variable} refused: {error}")
        self.variable = variable
        self.error = error

    @property
    def message(self) -> str:
        """One line for the operator: which token, Slack's reason, and where to get a new one."""
        return (
            f"Slack refused {self.variable} ({self.error}): {WHERE_TO_GET[self.variable]}, "
            f"set {self.variable} to it and start again."
        )


@dataclass(frozen=True)
class Backoff:
    """Seconds to wait before each retry: first, first·factor, … never more than `cap`."""

    first: float = 1.0
    factor: float = 2.0
    cap: float = 60.0

    def delays(self) -> Iterator[float]:
        delay = self.first
        while True:
            yield min(delay, self.cap)
            delay = min(delay * self.factor, self.cap)


def _slack_error(exc: SlackApiError) -> str:
    response: Any = exc.response
    data = getattr(response, "data", None)  # a non-JSON answer (a proxy's error page) has no JSON body
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, str) and error:
        return error
    return f"HTTP {getattr(response, 'status_code', '?')}"


def _retry_after(exc: SlackApiError) -> float:
    """Seconds Slack asked us to wait (429 Retry-After), 0 when it did not say."""
    headers = getattr(exc.response, "headers", None) or {}
    try:
        return max(0.0, float(headers.get("Retry-After", 0)))
    except (TypeError, ValueError):
        return 0.0


def _network_reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {ATTEMPT_TIMEOUT:.0f} s"
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def until_reached(
    attempt: Callable[[], Awaitable[T]],
    *,
    variable: TokenName,
    what: str,
    backoff: Backoff,
) -> T:
    """`attempt()` until it succeeds; TokenRefused if Slack refuses `variable`; network failures retried."""
    for number, delay in enumerate(backoff.delays(), 1):
        try:
            async with asyncio.timeout(ATTEMPT_TIMEOUT):
                return await attempt()
        except SlackApiError as exc:
            reason = _slack_error(exc)
            if reason in REFUSED:
                raise TokenRefused(variable, reason) from None
            delay = max(delay, _retry_after(exc))
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            reason = _network_reason(exc)
        log.warning(
            "%s failed (%s); retrying in %.0f s", what, reason, delay, extra={"attempt": number, "retry_in": delay}
        )
        await asyncio.sleep(delay)
    raise AssertionError("unreachable: Backoff.delays() never ends")


async def check_bot_token(client: AsyncWebClient, backoff: Backoff) -> Any:
    """auth.test with SLACK_BOT_TOKEN (every Web API call the bot makes uses it); Slack's answer."""
    return await until_reached(
        client.auth_test, variable="SLACK_BOT_TOKEN", what="checking SLACK_BOT_TOKEN with Slack (auth.test)",
        backoff=backoff,
    )


async def issue_socket_url(handler: AsyncSocketModeHandler, backoff: Backoff) -> str:
    """Ask Slack for a websocket URL with SLACK_APP_TOKEN (apps.connections.open): checks that token."""
    client = handler.client

    async def issue_url() -> str:
        response = await client.web_client.apps_connections_open(app_token=client.app_token)
        return str(response["url"])

    return await until_reached(
        issue_url, variable="SLACK_APP_TOKEN", what="opening the Socket Mode connection (apps.connections.open)",
        backoff=backoff,
    )


async def connect_socket(handler: AsyncSocketModeHandler, url: str, backoff: Backoff) -> None:
    """Let the SDK's client connect to `url`; from then on it answers pings and reconnects by itself.

    The SDK retries a failed websocket connect with the same URL for ever, but the URL expires:
    when the socket has not opened within ATTEMPT_TIMEOUT, ask Slack for a new one.
    """
    while True:
        handler.client.wss_uri = url
        try:
            async with asyncio.timeout(ATTEMPT_TIMEOUT):
                await handler.connect_async()
            return
        except TimeoutError:
            log.warning("the Socket Mode connection did not open within %.0f s; asking for a new URL", ATTEMPT_TIMEOUT)
        url = await issue_socket_url(handler, backoff)
