"""The bot's one way out to Slack: every post, edit, status line, stream, view and file goes through `send`.

The port holds the Web API client (only it and the outbox courier call Slack's methods), so what every
send needs is decided in one place:

- the fence: a message made under a thread's lease that this replica knows it lost is dropped, not
  sent (bot.base.lease); paced sends (bot.slack_send) run under the lease they were queued with;
- before anything reaches a person the run's writes are made durable (`before_send`, with replicas);
- durable posts and edits are recorded in the outbox first, which sends them until Slack has them;
- every chat.update spends from one edit budget, and the paced senders are made here (`pacer`);
- failing soft: a failed call is logged once and described in the returned `Delivery`, never raised
  into a turn. Short blips are retried inside the call by slack_sdk's retry handlers (bot.slack_client).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from slack_bolt.context.set_status.async_set_status import AsyncSetStatus
from slack_bolt.context.set_suggested_prompts.async_set_suggested_prompts import AsyncSetSuggestedPrompts
from slack_bolt.context.set_title.async_set_title import AsyncSetTitle
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from .base.lease import still_held
from .base.thread import ThreadKey
from .outgoing import (
    Delivery, Edit, Ephemeral, HomeView, OpenModal, Outgoing, Post, Reaction, SessionChange, StatusLine,
    StreamAppend, StreamStop, SuggestedPrompts, Title, Upload,
)
from .render.mrkdwn import defuse_mentions
from .slack_client import SLACK_FAILURES, attach_retry_handlers, failure_code
from .slack_send import CallBudget, Sender

log = logging.getLogger(__name__)

# What shows a run's work to a person, so the run's writes are made durable first. The rest (reactions,
# status lines, agent sessions, streamed words, the Home tab) says only that the bot is at work, or
# shows what is durable already, and must not wait for a database that is away.
FLUSHED_FIRST = frozenset({"post", "edit", "ephemeral", "upload", "modal"})
FENCED = Delivery(sent=False, fenced=True)


class DurableSender(Protocol):
    """The outbox (bot.outbox.courier): records a post or an edit, then sends it until Slack has it."""

    async def post(self, channel: str, thread_ts: str | None, payload: dict[str, Any]) -> str | None: ...

    async def update(self, channel: str, ts: str, payload: dict[str, Any]) -> bool: ...


class SlackPort:
    def __init__(self, client: AsyncWebClient, *, before_send: Callable[[], Awaitable[None]] | None = None) -> None:
        self.client = client
        # Awaited before anything reaches a user: replicas make the run's writes durable first.
        self.before_send = before_send
        # chat.update's workspace budget (set with the edit pacer): every edit counts, whoever makes it.
        self.edit_budget: CallBudget | None = None
        # What a person must see goes through it (set at start-up); without one, posts fail soft.
        self.outbox: DurableSender | None = None
        self.failures = 0  # failed calls, for the benchmarks and tests
        attach_retry_handlers(client)
        # slack_sdk decides whether to format its debug lines (the whole request and response) from
        # `logger.level`, which is 0 for a logger without a level of its own, so it formats them on
        # every call only for logging to drop them. Giving its logger the level it has in effect
        # anyway keeps what is logged the same and saves about a sixth of each call's CPU.
        if client.logger.level == logging.NOTSET:
            client.logger.setLevel(client.logger.getEffectiveLevel())

    def pacer(
        self, method: str, *, budget: CallBudget | None, reserve: float = 0.0, interval: float = 0.0
    ) -> Sender:
        """A paced sender for one rate budget (see bot.slack_send); chat.update's budget is the edit budget."""
        if method == "chat.update":
            self.edit_budget = budget
        return Sender(method, budget=budget, reserve=reserve, interval=interval)

    async def open_stream(self, key: ThreadKey, recipient: str | None) -> AsyncChatStream:
        """The handle a streamed reply's appends and stop go through (nothing is sent yet: the first
        `StreamAppend` starts the stream)."""
        return await self.client.chat_stream(
            channel=key.channel,
            thread_ts=key.thread_ts,
            recipient_team_id=key.team,
            recipient_user_id=recipient,
            buffer_size=1,  # the reply stream decides when a piece goes out
        )

    async def send(self, message: Outgoing) -> Delivery:
        """Send one message now (a durable one: record it, and send it in the outbox's turn)."""
        if not still_held(message.lease):
            return FENCED  # another replica drives the thread now: nothing of ours is shown there
        if isinstance(message, Edit) and not message.budgeted and self.edit_budget is not None:
            self.edit_budget.spend()
        if isinstance(message, (Post, Edit)) and message.durable and self.outbox is not None:
            return await self._through_outbox(message)
        if self.before_send is not None and _shows_run(message):
            await self.before_send()
        try:
            response = await self._call(message)
        except SLACK_FAILURES as exc:
            self.failures += 1
            log.warning("slack call failed", extra={"call": message.kind, "error": failure_code(exc)})
            return Delivery(sent=False, error=exc)
        ts = response.get("ts") if hasattr(response, "get") else None
        return Delivery(sent=True, ts=str(ts) if ts else None)

    async def _through_outbox(self, message: Post | Edit) -> Delivery:
        assert self.outbox is not None
        if isinstance(message, Post):
            ts = await self.outbox.post(message.channel, message.thread_ts, message.message.payload())
            return Delivery(sent=True, ts=ts)
        return Delivery(sent=await self.outbox.update(message.channel, message.ts, message.message.payload()))

    async def _call(self, message: Outgoing) -> Any:
        """The Web API call for one message; raises what slack_sdk raises."""
        client = self.client
        match message:
            case Post(channel=channel, thread_ts=thread_ts, message=body):
                return await client.chat_postMessage(
                    channel=channel, thread_ts=thread_ts, unfurl_links=False, **body.payload()
                )
            case Edit(channel=channel, ts=ts, message=body):
                return await client.chat_update(channel=channel, ts=ts, **body.payload())
            case Ephemeral():
                text = defuse_mentions(message.text, users=False)
                return await client.chat_postEphemeral(
                    channel=message.channel, user=message.user, text=text, thread_ts=message.thread_ts
                )
            case Reaction(channel=channel, ts=ts, name=name, add=add):
                call = client.reactions_add if add else client.reactions_remove
                return await call(channel=channel, timestamp=ts, name=name)
            case Upload():
                return await client.files_upload_v2(
                    channel=message.channel, thread_ts=message.thread_ts, content=message.content,
                    filename=message.filename, title=message.title,
                )
            case OpenModal(trigger_id=trigger_id, view=view):
                return await client.views_open(trigger_id=trigger_id, view=view)
            case HomeView(user=user, view=view):
                return await client.views_publish(user_id=user, view=view)
            case _:
                return await self._agent_call(message)

    async def _agent_call(self, message: Outgoing) -> Any:
        """Slack's agent surfaces: the status line, titles, agent sessions, streamed replies."""
        client = self.client
        match message:
            case StatusLine():
                loading = list(message.loading_messages) if message.loading_messages else None
                await AsyncSetStatus(client, message.channel, message.thread_ts)(
                    status=message.status, loading_messages=loading
                )
                return {}
            case Title():
                await AsyncSetTitle(client, message.channel, message.thread_ts)(message.title)
                return {}
            case SuggestedPrompts():
                set_prompts = AsyncSetSuggestedPrompts(client, message.channel, message.thread_ts)
                return await set_prompts(prompts=list(message.prompts), title=message.title)
            case SessionChange(channel=channel, thread_ts=thread_ts, status=None, title=title):
                return await client.agents_sessions_rename(channel_id=channel, thread_ts=thread_ts, title=title)
            case SessionChange():
                return await client.agents_sessions_setStatus(
                    channel_id=message.channel, thread_ts=message.thread_ts, status=message.status,
                    title=message.title,
                )
            case StreamAppend(stream=stream, text=text):
                return await stream.append(markdown_text=text) or {}
            case StreamStop(stream=stream, text=text, blocks=footer):
                return await stream.stop(markdown_text=text, blocks=footer)
        raise TypeError(f"not a message the port sends: {message!r}")

    async def user_identity(self, user: str) -> tuple[str | None, str | None]:
        """(name, email) from the user's Slack profile; Nones when Slack won't say (e.g. no users:read.email)."""
        try:
            response = await self.client.users_info(user=user)
        except SLACK_FAILURES as exc:
            log.warning("slack call failed", extra={"call": "users.info", "error": failure_code(exc)})
            return None, None
        info = response.get("user") or {}
        profile = info.get("profile") or {}
        name = profile.get("real_name") or info.get("real_name") or profile.get("display_name") or info.get("name")
        email = profile.get("email")
        return (str(name) if name else None), (str(email) if email else None)

    async def workspace_url(self) -> str | None:
        """The workspace's address (auth.test); None when Slack would not say."""
        try:
            response = await self.client.auth_test()
        except SLACK_FAILURES as exc:
            log.info("workspace address unknown; thread links go through slack.com", extra={"error": failure_code(exc)})
            return None
        return str(response.get("url") or "https://slack.com/")


def _shows_run(message: Outgoing) -> bool:
    return message.kind in FLUSHED_FIRST and not (isinstance(message, Post) and not message.shows_run)


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


def upload_failure(delivery: Delivery) -> UploadFailure | None:
    """Why an upload's delivery failed, in words for the person; None when Slack has the file (or the
    thread passed to another replica, which then says nothing)."""
    exc = delivery.error
    if delivery.sent or exc is None:
        return None
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
