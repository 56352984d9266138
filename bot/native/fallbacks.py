"""Fallbacks for Slack's newer agent surfaces (streams, the status line, the plan block, thread titles).

A workspace, a channel type or an older client may refuse a newer method (`not_allowed`,
`not_supported`, `missing_scope`, rate limits after the SDK's retries...). The thread then goes
back to what the bot did before for that feature — post + update, the working reaction, the
drawn status — once, quietly, and remembers it, so a refused method is not tried again there.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

import aiohttp
from slack_sdk.errors import SlackApiError, SlackRequestError

log = logging.getLogger(__name__)

STREAM = "stream"
STATUS = "status"
PLAN = "plan"
TITLE = "title"

KEPT_THREADS = 5000  # threads whose fallbacks are remembered; the oldest are forgotten (and retried)
SLACK_FAILURES = (SlackApiError, SlackRequestError, aiohttp.ClientError, TimeoutError)


def error_code(exc: BaseException) -> str:
    """Slack's error code, or the kind of transport failure (for the log, never for the user)."""
    if isinstance(exc, SlackApiError):
        return str(exc.response.get("error") or "slack_error")
    return type(exc).__name__


class Fallbacks:
    def __init__(self, kept: int = KEPT_THREADS) -> None:
        self._off: OrderedDict[str, set[str]] = OrderedDict()
        self.kept = kept
        self.count = 0  # fallbacks taken, for the log and the benchmarks

    def allows(self, thread: str, feature: str) -> bool:
        return feature not in self._off.get(thread, ())

    def fall_back(self, thread: str, feature: str, exc: BaseException | str) -> None:
        """From now on this thread does `feature` the old way."""
        off = self._off.setdefault(thread, set())
        self._off.move_to_end(thread)
        if feature in off:
            return
        off.add(feature)
        self.count += 1
        code = exc if isinstance(exc, str) else error_code(exc)
        log.info("slack feature unavailable, falling back", extra={"feature": feature, "error": code})
        while len(self._off) > self.kept:
            self._off.popitem(last=False)
