"""A shared call budget per Slack method family, so many concurrent runs stay inside one rate tier.

Slack's tiers count calls per method, per workspace, per minute (Tier 3 ≈ 50, Tier 4 ≈ 100, with
short bursts allowed). Callers that can wait and coalesce (a stream's next piece) ask `take()`
and keep buffering when it says no.
"""

from __future__ import annotations

import time


class CallBudget:
    def __init__(self, per_minute: float, burst: int) -> None:
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._tokens = float(burst)
        self._at = time.monotonic()

    def take(self) -> bool:
        """Spend one call if the budget has one now."""
        now = time.monotonic()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
