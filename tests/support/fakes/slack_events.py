"""Build and deliver signed Slack Events API / interactivity requests.

The payloads mirror what Slack sends so a Bolt app under test runs its real
signature check, body parsing and listener matching. Signatures come from
slack_sdk's own `SignatureVerifier`, so they match whatever Bolt verifies.

    envelope = app_mention_event("<@UBOT> run", channel="C1", ts="1700000001.000100")
    status, body = await deliver_event(session, bot_url, SECRET, envelope)
"""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import aiohttp
from slack_sdk.signature import SignatureVerifier

VERIFICATION_TOKEN = "fake-verification-token"
"""The legacy `token` field Slack still puts in payloads (Bolt ignores it)."""

_ts_counter = itertools.count(1)


def new_ts() -> str:
    """A unique, increasing Slack-style message ts ("1700000000.000001")."""
    return f"{int(time.time())}.{next(_ts_counter):06d}"


def new_event_id() -> str:
    """A fresh Events API event_id ("Ev" + 10 upper-case chars)."""
    return "Ev" + uuid.uuid4().hex[:10].upper()


def new_trigger_id() -> str:
    """A fresh trigger_id, shaped like Slack's."""
    return f"{int(time.time())}.{uuid.uuid4().int % 10**12}.{uuid.uuid4().hex}"


def sign(secret: str, body: str | bytes, timestamp: int | str | None = None) -> dict[str, str]:
    """The X-Slack-Request-Timestamp / X-Slack-Signature headers for `body`.

    Bolt rejects timestamps older than five minutes, so the default is now.
    """
    ts = str(int(time.time()) if timestamp is None else timestamp)
    signature = SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)
    assert signature is not None
    return {"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": signature}


# ---- Events API -------------------------------------------------------------


def event_envelope(
    event: Mapping[str, Any],
    *,
    team: str = "T1",
    api_app_id: str = "A1",
    event_id: str | None = None,
    event_time: int | None = None,
    bot_user_id: str = "UBOT",
) -> dict[str, Any]:
    """Wrap an inner event in the `event_callback` envelope Slack posts."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team,
        "context_team_id": team,
        "context_enterprise_id": None,
        "api_app_id": api_app_id,
        "event": dict(event),
        "type": "event_callback",
        "event_id": event_id or new_event_id(),
        "event_time": event_time if event_time is not None else int(time.time()),
        "authorizations": [
            {
                "enterprise_id": None,
                "team_id": team,
                "user_id": bot_user_id,
                "is_bot": True,
                "is_enterprise_install": False,
            }
        ],
        "is_ext_shared_channel": False,
        "event_context": f"4-{uuid.uuid4().hex}",
    }


def app_mention_event(
    text: str,
    channel: str = "C1",
    ts: str | None = None,
    thread_ts: str | None = None,
    user: str = "U1",
    team: str = "T1",
    event_id: str | None = None,
    *,
    api_app_id: str = "A1",
    bot_user_id: str = "UBOT",
) -> dict[str, Any]:
    """An app_mention envelope; `text` is verbatim, so include `<@UBOT>`."""
    ts = ts or new_ts()
    event: dict[str, Any] = {
        "type": "app_mention",
        "user": user,
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "team": team,
        "client_msg_id": str(uuid.uuid4()),
    }
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event_envelope(event, team=team, api_app_id=api_app_id, event_id=event_id, bot_user_id=bot_user_id)


def agent_session_stopped_event(
    channel: str,
    thread_ts: str,
    user: str = "U1",
    team: str = "T1",
    *,
    streaming_message_ts: list[str] | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    """Someone pressed Slack's own Stop on the thread's agent session (the inner event carries no team)."""
    event = {
        "type": "agent_session_stopped",
        "channel": channel,
        "user": user,
        "thread_ts": thread_ts,
        "streaming_message_ts": list(streaming_message_ts or []),
        "event_ts": new_ts(),
    }
    return event_envelope(event, team=team, event_id=event_id)


def message_event(
    text: str,
    channel: str = "C1",
    ts: str | None = None,
    *,
    user: str | None = "U1",
    channel_type: str = "channel",
    subtype: str | None = None,
    bot_id: str | None = None,
    thread_ts: str | None = None,
    team: str = "T1",
    event_id: str | None = None,
    api_app_id: str = "A1",
    bot_user_id: str = "UBOT",
) -> dict[str, Any]:
    """A `message` envelope; channel_type is "channel", "group", "im" or "mpim".

    Pass `bot_id` (and e.g. subtype="bot_message", user=None) to model the
    bot's own or another bot's posts, which handlers must ignore.
    """
    ts = ts or new_ts()
    event: dict[str, Any] = {
        "type": "message",
        "text": text,
        "ts": ts,
        "channel": channel,
        "event_ts": ts,
        "channel_type": channel_type,
        "team": team,
    }
    if user is not None:
        event["user"] = user
    if subtype is not None:
        event["subtype"] = subtype
    if bot_id is not None:
        event["bot_id"] = bot_id
    else:
        event["client_msg_id"] = str(uuid.uuid4())
    if thread_ts:
        event["thread_ts"] = thread_ts
    return event_envelope(event, team=team, api_app_id=api_app_id, event_id=event_id, bot_user_id=bot_user_id)


def app_home_opened_event(
    user: str = "U1",
    *,
    tab: str = "home",
    channel: str = "D1",
    view: Mapping[str, Any] | None = None,
    team: str = "T1",
    api_app_id: str = "A1",
) -> dict[str, Any]:
    """An app_home_opened envelope; `view` is the Home view the user saw last (Slack includes it once published)."""
    event: dict[str, Any] = {
        "type": "app_home_opened", "user": user, "channel": channel, "tab": tab, "event_ts": new_ts(),
    }
    if view is not None:
        event["view"] = dict(view)
    return event_envelope(event, team=team, api_app_id=api_app_id)


def url_verification_body(challenge: str = "challenge-token") -> dict[str, Any]:
    """The handshake Slack sends when the Events URL is configured."""
    return {"token": VERIFICATION_TOKEN, "challenge": challenge, "type": "url_verification"}


# ---- Interactivity ----------------------------------------------------------


def _user(user: str, team: str) -> dict[str, Any]:
    return {"id": user, "username": f"user-{user.lower()}", "name": f"user-{user.lower()}", "team_id": team}


def block_actions_payload(
    action_id: str,
    value: str | None = None,
    user: str = "U1",
    channel: str = "C1",
    message_ts: str | None = None,
    thread_ts: str | None = None,
    *,
    block_id: str = "actions",
    team: str = "T1",
    api_app_id: str = "A1",
    trigger_id: str | None = None,
    response_url: str | None = None,
    action_type: str = "button",
    message_text: str = "",
    message_blocks: list[dict[str, Any]] | None = None,
    bot_user_id: str = "UBOT",
    bot_id: str = "BBOT",
) -> dict[str, Any]:
    """A block_actions payload for a button clicked on a bot message.

    `response_url` is omitted unless given (Slack's would reach the internet);
    pass `FakeSlack.response_url()` to capture Bolt `respond()` calls.
    """
    message_ts = message_ts or new_ts()
    message: dict[str, Any] = {
        "type": "message",
        "user": bot_user_id,
        "bot_id": bot_id,
        "app_id": api_app_id,
        "team": team,
        "text": message_text,
        "ts": message_ts,
        "blocks": message_blocks or [],
    }
    container: dict[str, Any] = {
        "type": "message",
        "message_ts": message_ts,
        "channel_id": channel,
        "is_ephemeral": False,
    }
    if thread_ts:
        message["thread_ts"] = thread_ts
        container["thread_ts"] = thread_ts
    action: dict[str, Any] = {
        "action_id": action_id,
        "block_id": block_id,
        "type": action_type,
        "action_ts": f"{time.time():.6f}",
    }
    if action_type == "button":
        action["text"] = {"type": "plain_text", "text": action_id, "emoji": True}
    if value is not None:
        action["value"] = value
    payload: dict[str, Any] = {
        "type": "block_actions",
        "user": _user(user, team),
        "api_app_id": api_app_id,
        "token": VERIFICATION_TOKEN,
        "container": container,
        "trigger_id": trigger_id or new_trigger_id(),
        "team": {"id": team, "domain": team.lower()},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": channel, "name": f"channel-{channel.lower()}"},
        "message": message,
        "state": {"values": {}},
        "actions": [action],
    }
    if response_url is not None:
        payload["response_url"] = response_url
    return payload


def view_submission_payload(
    callback_id: str,
    private_metadata: str = "",
    values: Mapping[str, Mapping[str, Any]] | None = None,
    user: str = "U1",
    *,
    team: str = "T1",
    api_app_id: str = "A1",
    view_id: str | None = None,
    trigger_id: str | None = None,
    bot_id: str = "BBOT",
) -> dict[str, Any]:
    """A modal submission; `values` is `view.state.values` verbatim, e.g.
    `{"block": {"action": {"type": "plain_text_input", "value": "x"}}}`."""
    view_id = view_id or "V" + uuid.uuid4().hex[:10].upper()
    return {
        "type": "view_submission",
        "team": {"id": team, "domain": team.lower()},
        "user": _user(user, team),
        "api_app_id": api_app_id,
        "token": VERIFICATION_TOKEN,
        "trigger_id": trigger_id or new_trigger_id(),
        "view": {
            "id": view_id,
            "team_id": team,
            "type": "modal",
            "blocks": [],
            "private_metadata": private_metadata,
            "callback_id": callback_id,
            "state": {"values": {k: dict(v) for k, v in (values or {}).items()}},
            "hash": uuid.uuid4().hex[:16],
            "title": {"type": "plain_text", "text": "Form", "emoji": True},
            "clear_on_close": False,
            "notify_on_close": False,
            "close": None,
            "submit": {"type": "plain_text", "text": "Submit", "emoji": True},
            "previous_view_id": None,
            "root_view_id": view_id,
            "app_id": api_app_id,
            "external_id": "",
            "app_installed_team_id": team,
            "bot_id": bot_id,
        },
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


# ---- delivery ---------------------------------------------------------------


async def deliver(
    session: aiohttp.ClientSession,
    url: str,
    secret: str,
    body: str,
    content_type: str,
    *,
    timestamp: int | str | None = None,
    signed: bool = True,
    extra_headers: Mapping[str, str] | None = None,
) -> tuple[int, str]:
    """POST a raw body the way Slack does; returns (status, response text)."""
    headers = {"Content-Type": content_type}
    if signed:
        headers.update(sign(secret, body, timestamp))
    headers.update(extra_headers or {})
    async with session.post(url, data=body.encode("utf-8"), headers=headers) as response:
        return response.status, await response.text()


async def deliver_event(
    session: aiohttp.ClientSession,
    url: str,
    secret: str,
    event_envelope: Mapping[str, Any],
    timestamp: int | str | None = None,
    signed: bool = True,
    retry_num: int | None = None,
    retry_reason: str = "http_timeout",
) -> tuple[int, str]:
    """POST an Events API envelope as JSON; `retry_num` adds Slack's retry headers."""
    extra: dict[str, str] = {}
    if retry_num is not None:
        extra = {"X-Slack-Retry-Num": str(retry_num), "X-Slack-Retry-Reason": retry_reason}
    return await deliver(
        session,
        url,
        secret,
        json.dumps(event_envelope),
        "application/json",
        timestamp=timestamp,
        signed=signed,
        extra_headers=extra,
    )


async def deliver_command(
    session: aiohttp.ClientSession,
    url: str,
    secret: str,
    payload: Mapping[str, Any],
    timestamp: int | str | None = None,
    signed: bool = True,
) -> tuple[int, str]:
    """POST a slash command form-encoded, as Slack does (the fields at the top level)."""
    body = urlencode({k: str(v) for k, v in payload.items()})
    return await deliver(
        session, url, secret, body, "application/x-www-form-urlencoded", timestamp=timestamp, signed=signed
    )


async def deliver_interaction(
    session: aiohttp.ClientSession,
    url: str,
    secret: str,
    payload: Mapping[str, Any],
    timestamp: int | str | None = None,
    signed: bool = True,
) -> tuple[int, str]:
    """POST an interaction form-encoded as `payload=<json>`, as Slack does."""
    body = urlencode({"payload": json.dumps(payload)})
    return await deliver(
        session,
        url,
        secret,
        body,
        "application/x-www-form-urlencoded",
        timestamp=timestamp,
        signed=signed,
    )
