"""The Web API calls the bot makes, each one failing soft: a Slack hiccup is logged, never raised into a turn.

A failed post must not abort a run that already did its work; callers get None/False and go on.
Short blips are retried inside each call by slack_sdk's own retry handlers: rate limits (honouring
Retry-After), 5xx answers and dropped connections. What must reach a person even through a longer
outage goes through the durable outbox (bot.outbox) instead of failing soft.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from slack_sdk.errors import SlackApiError, SlackRequestError
from slack_sdk.models.views import View
from slack_sdk.web.async_client import AsyncWebClient

from .render.message import SlackMessage
from .render.mrkdwn import defuse_mentions
from .slack_client import attach_retry_handlers
from .slack_send import CallBudget

log = logging.getLogger(__name__)


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


class DurableSender(Protocol):
    """The outbox (bot.outbox.courier): records a post or an edit, then sends it until Slack has it."""

    async def post(self, channel: str, thread_ts: str | None, payload: dict[str, Any]) -> str | None: ...

    async def update(self, channel: str, ts: str, payload: dict[str, Any]) -> bool: ...


# Slack errors that asking again will not fix: the bot's setup or the channel must change first.
PERMANENT_UPLOAD_ERRORS = {
    "not_in_channel": "I'm not a member of this channel, so I can't post files here. Invite me, then try again.",
    "channel_not_found": "I can't post files in this conversation (I'm not in it). Invite me, then try again.",
    "missing_scope": "This bot isn't allowed to upload files (its Slack app lacks the files:write scope). "
    "Ask whoever runs the bot to add it.",
    "not_allowed_token_type": "This bot isn't allowed to upload files. Ask whoever runs the bot to check its setup.",
    "file_uploads_disabled": "File uploads are turned off in this workspace, so I can't post the file.",
    "file_uploads_except_images_disabled": "This workspace only allows image uploads, so I can't post this file.",
    "restricted_action": "This channel doesn't allow the bot to post files.",
    "is_archived": "This channel is archived, so no files can be posted in it.",
    "file_upload_size_restricted": "The file is larger than this workspace allows for uploads.",
    "invalid_auth": "Slack rejected the bot's credentials. Ask whoever runs the bot to check them.",
    "token_revoked": "The bot's Slack access was revoked. Ask whoever runs the bot to reinstall it.",
}


@dataclass(frozen=True)
class UploadFailure:
    """Why an upload did not happen, in words for the person who asked for it."""

    permanent: bool
    reason: str


def upload_refusal(path: str, failure: UploadFailure) -> str:
    if failure.permanent:
        return f"I couldn't post `{path}`: {failure.reason}"
    return f"Slack didn't take the upload of `{path}` ({failure.reason}). Please try again in a minute."


def _upload_failure(exc: Exception) -> UploadFailure:
    if isinstance(exc, SlackApiError):
        code = str(exc.response.get("error") or "")
        if code in PERMANENT_UPLOAD_ERRORS:
            return UploadFailure(True, PERMANENT_UPLOAD_ERRORS[code])
        if code == "ratelimited":
            return UploadFailure(False, "too many requests right now")
        return UploadFailure(False, "Slack reported an error")
    if isinstance(exc, TimeoutError):
        return UploadFailure(False, "Slack did not answer in time")
    return UploadFailure(False, "the file transfer to Slack failed")


class SlackIO:
    def __init__(self, client: AsyncWebClient, *, before_send: Callable[[], Awaitable[None]] | None = None) -> None:
        self.client = client
        # Awaited before anything reaches a user: replicas make the run's writes durable first.
        self.before_send = before_send
        # chat.update's workspace budget (set by the status board): every edit counts, whoever makes it.
        self.edit_budget: CallBudget | None = None
        # What a person must see goes through it (set at start-up); without one, posts fail soft.
        self.outbox: DurableSender | None = None
        self.last_failure: BaseException | None = None  # the newest failed call's error, read right after it
        attach_retry_handlers(client)
        # slack_sdk decides whether to format its debug lines (the whole request and response) from
        # `logger.level`, which is 0 for a logger without a level of its own, so it formats them on
        # every call only for logging to drop them. Giving its logger the level it has in effect
        # anyway keeps what is logged the same and saves about a sixth of each call's CPU.
        if client.logger.level == logging.NOTSET:
            client.logger.setLevel(client.logger.getEffectiveLevel())

    async def _call(self, what: str, coro: Any) -> Any:
        if self.before_send is not None and what != "reactions":
            await self.before_send()
        try:
            return await coro
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("slack call failed", extra={"call": what, "error": failure_code(exc)})
            self.last_failure = exc
            return None

    async def post(
        self, channel: str, thread_ts: str | None, message: SlackMessage, *, durable: bool = True
    ) -> str | None:
        """Post in a thread; returns the new message's ts (None: not shown yet, or refused).

        `durable`: through the outbox, so it is shown once Slack can take it (a status message whose
        newer drawings follow anyway is not)."""
        if durable and self.outbox is not None:
            return await self.outbox.post(channel, thread_ts, message.payload())
        response = await self._call(
            "chat.postMessage",
            self.client.chat_postMessage(channel=channel, thread_ts=thread_ts, unfurl_links=False, **message.payload()),
        )
        return str(response["ts"]) if response is not None else None

    async def update(
        self, channel: str, ts: str, message: SlackMessage, *, budgeted: bool = False, durable: bool = True
    ) -> bool:
        """Edit a message now (`budgeted`: its call was already taken from the edit budget). `durable`:
        an edit that changes what the message means, kept in the outbox until Slack takes it."""
        if not budgeted and self.edit_budget is not None:
            self.edit_budget.spend()
        if durable and self.outbox is not None:
            return await self.outbox.update(channel, ts, message.payload())
        response = await self._call("chat.update", self.client.chat_update(channel=channel, ts=ts, **message.payload()))
        return response is not None

    async def ephemeral(self, channel: str, user: str, text: str, thread_ts: str | None = None) -> bool:
        response = await self._call(
            "chat.postEphemeral",
            self.client.chat_postEphemeral(
                channel=channel, user=user, text=defuse_mentions(text, users=False), thread_ts=thread_ts
            ),
        )
        return response is not None

    async def react(self, channel: str, ts: str, name: str, *, add: bool = True) -> None:
        call = self.client.reactions_add if add else self.client.reactions_remove
        await self._call("reactions", call(channel=channel, timestamp=ts, name=name))

    async def upload(
        self, channel: str, thread_ts: str, filename: str, content: bytes, title: str
    ) -> UploadFailure | None:
        """Post a file in a thread; None when it worked, else why not (permanent or worth retrying)."""
        if self.before_send is not None:
            await self.before_send()
        try:
            await self.client.files_upload_v2(
                channel=channel, thread_ts=thread_ts, content=content, filename=filename, title=title
            )
        except (SlackApiError, SlackRequestError, aiohttp.ClientError, TimeoutError) as exc:
            # SlackRequestError: the file transfer step (not an API call) failed; its text names the server.
            log.warning("slack call failed", extra={"call": "files_upload_v2", "error": failure_code(exc)})
            return _upload_failure(exc)
        return None

    async def user_identity(self, user: str) -> tuple[str | None, str | None]:
        """(name, email) from the user's Slack profile; Nones when Slack won't say (e.g. no users:read.email)."""
        response = await self._call("users.info", self.client.users_info(user=user))
        info = (response.get("user") if response is not None else None) or {}
        profile = info.get("profile") or {}
        name = profile.get("real_name") or info.get("real_name") or profile.get("display_name") or info.get("name")
        email = profile.get("email")
        return (str(name) if name else None), (str(email) if email else None)

    async def open_view(self, trigger_id: str, view: View) -> bool:
        response = await self._call("views.open", self.client.views_open(trigger_id=trigger_id, view=view))
        return response is not None
