"""Finding in a thread what the outbox may have put there already, when nobody heard Slack's answer: a post
by the entry id its metadata carries, a streamed message by whether it still streams."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ..slack_client import failure_code, transient_failure
from .entry import OutboxEntry, marked_entry

LOOKUP_PAGES = 5  # pages of a thread read when looking for an entry that may have been posted
STOPPED_BY_USER = "stopped_by_user"  # the person pressed Slack's stop on a streamed reply


async def find_marked(client: AsyncWebClient, entry: OutboxEntry) -> str | None:
    """The ts of the message carrying this entry's id in its thread, if Slack already has it."""
    try:
        async for message in thread_since(client, entry):
            if marked_entry(message) == entry.id:
                return str(message["ts"])
    except SlackApiError as exc:
        if transient_failure(exc):
            raise
        return None  # the thread cannot be read (not found, no history scope): it is posted
    return None


async def stop_streaming(
    client: AsyncWebClient, entry: OutboxEntry, known: set[str], note: list[dict[str, Any]]
) -> str | None:
    """The message Slack opened for a stream recorded before its start, stopped here with `note`: the bot's
    newest message in the thread since the record, other than the `known` ones, that still streams. Each
    message of the bot without an outbox mark is asked to stop, newest first; one that does not stream refuses
    and is left as it is. None when there is none (Slack never opened it). Raises when Slack is away."""
    mine = [m async for m in thread_since(client, entry) if m.get("bot_id") and marked_entry(m) is None]
    for message in reversed(mine):
        ts = str(message.get("ts") or "")
        if ts in known:
            continue
        try:
            await client.chat_stopStream(channel=entry.channel, ts=ts, chunks=note)
        except SlackApiError as exc:
            if transient_failure(exc):
                raise
            if failure_code(exc) != STOPPED_BY_USER:
                continue  # not a streaming message
        return ts
    return None


async def thread_since(client: AsyncWebClient, entry: OutboxEntry) -> AsyncIterator[dict[str, Any]]:
    """The messages of the entry's thread from a minute before it was recorded on, oldest first."""
    cursor: str | None = None
    for _ in range(LOOKUP_PAGES):
        response = await client.conversations_replies(
            channel=entry.channel,
            ts=entry.thread_ts or "",
            oldest=f"{entry.created - 60:.6f}",
            include_all_metadata=True,
            limit=200,
            cursor=cursor,
        )
        for message in response.get("messages") or []:
            yield message
        cursor = ((response.get("response_metadata") or {}).get("next_cursor")) or None
        if not cursor:
            return
