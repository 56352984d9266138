"""Fallbacks for Slack's newer agent surfaces (streams, the status line, the plan block, thread titles).

A workspace, a channel type or an older client may refuse a newer method (`not_allowed`,
`method_not_supported_for_channel_type`, `missing_scope`, `invalid_blocks`...). The thread then goes
back to what the bot did before for that feature — post + update, the working reaction, the
drawn status — once, quietly, and remembers it, so a refused method is not tried again there.

A failure that says nothing about the feature (a 5xx, a 429 after the SDK's retries, a timeout, a
dropped connection) is transient: that one call is done the old way, and the feature stays on.
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from ..slack_client import failure_code, transient_failure

log = logging.getLogger(__name__)

STREAM = "stream"
STATUS = "status"
PLAN = "plan"
TITLE = "title"

KEPT_THREADS = 5000  # threads whose fallbacks are remembered; the oldest are forgotten (and retried)


error_code = failure_code


class Fallbacks:
    def __init__(self, kept: int = KEPT_THREADS) -> None:
        self._off: OrderedDict[str, set[str]] = OrderedDict()
        self.kept = kept
        self.count = 0  # fallbacks taken, for the log and the benchmarks

    def allows(self, thread: str, feature: str) -> bool:
        return feature not in self._off.get(thread, ())

    def fall_back(self, thread: str, feature: str, exc: BaseException | str) -> bool:
        """From now on this thread does `feature` the old way, unless the failure was transient.
        Returns whether the feature was switched off."""
        if transient_failure(exc):
            log.debug("slack feature call failed; trying it again next time", extra={"feature": feature, "error": error_code(exc)})
            return False
        off = self._off.setdefault(thread, set())
        self._off.move_to_end(thread)
        if feature in off:
            return True
        off.add(feature)
        self.count += 1
        code = exc if isinstance(exc, str) else error_code(exc)
        log.info("slack feature unavailable, falling back", extra={"feature": feature, "error": code})
        while len(self._off) > self.kept:
            self._off.popitem(last=False)
        return True
