"""Which worker process owns a Slack thread, decided from the raw request alone.

With several workers, every request about one thread must reach the same process: that is
what keeps a thread's events in order, its dedupe in one memory and its run driven by one
engine. The owner is a stable hash of (channel, thread_ts), so a restarted worker owns the
same threads as before. A request that names no thread (url_verification, app events we do
not handle) goes to worker 0; its reply does not depend on any thread.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs

from .actions import ButtonValue
from .forms import decode_context
from .threads import ThreadKey


def shard_of(channel: str, thread_ts: str, count: int) -> int:
    return zlib.crc32(f"{channel}:{thread_ts}".encode()) % count if count > 1 else 0


def owned_by(index: int, count: int) -> Callable[[ThreadKey], bool]:
    """The predicate a worker uses to pick its own threads (e.g. runs to resume after a restart)."""
    return lambda key: shard_of(key.channel, key.thread_ts, count) == index


def parse_body(body: bytes, content_type: str) -> dict[str, Any] | None:
    """A Slack request body as a dict: JSON for events, a `payload=` form field for interactions."""
    try:
        if content_type.startswith("application/json"):
            parsed = json.loads(body)
        else:
            form = parse_qs(body.decode("utf-8"))
            parsed = json.loads(form["payload"][0]) if "payload" in form else {k: v[0] for k, v in form.items()}
    except (ValueError, UnicodeDecodeError):
        return None
    return parsed if isinstance(parsed, dict) else None


def thread_of(payload: dict[str, Any]) -> tuple[str, str] | None:
    """(channel, thread_ts) the request is about, read the way the handlers read it."""
    if payload.get("type") == "event_callback":
        event = payload.get("event") or {}
        channel, ts = event.get("channel"), event.get("thread_ts") or event.get("ts")
        return (str(channel), str(ts)) if channel and ts else None
    if payload.get("type") == "block_actions":
        for action in payload.get("actions") or []:
            # Buttons carry the session key in their value; selects carry it in their block_id.
            value = ButtonValue.decode(action.get("value")) or ButtonValue.decode(action.get("block_id"))
            if value is not None:
                return _split(value.s)
        return None
    if payload.get("type") == "view_submission":
        context = decode_context((payload.get("view") or {}).get("private_metadata"))
        return _split(context.s) if context is not None else None
    return None


def _split(session_key: str) -> tuple[str, str] | None:
    key = ThreadKey.parse(session_key)
    return (key.channel, key.thread_ts) if key is not None else None


def route(payload: dict[str, Any] | None, count: int) -> int:
    """The worker index for a parsed request (0 when it names no thread)."""
    where = thread_of(payload) if payload is not None else None
    return shard_of(*where, count) if where is not None else 0
