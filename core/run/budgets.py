"""Daily token budgets per person and per channel, read from the operator log before a request may use the model.

A budget is a day's total of model tokens (input + output, as the endpoint reported them) for one
person or one channel; the day is the UTC calendar day, so every replica and every reader agrees on
when it resets (midnight UTC) without knowing anybody's time zone. The check is made per request: a
request that passes finishes its work even if that takes it past the budget; the next one is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from pydantic import BaseModel, ConfigDict, Field

from ..store.operator_log import OperatorLog, UsageBy


class Budgets(BaseModel):
    """Daily model-token budgets. Once a person (or a channel) has used its budget for the UTC day, its next
    request that would call the model is refused in the thread, saying which budget and when it resets (00:00
    UTC). Runs waiting for that person stay as they are and can be continued after the reset."""

    model_config = ConfigDict(extra="forbid")

    daily_tokens_per_user: int | None = Field(default=None, ge=1)  # tokens one Slack user may use per UTC day
    daily_tokens_per_channel: int | None = Field(default=None, ge=1)  # tokens one channel may use per UTC day
    exempt_admins: bool = False  # true: `access.admins` are never refused


@dataclass(frozen=True)
class BudgetRefusal:
    budget: str  # the setting's name, as the operator wrote it in crewagent.yml
    limit: int
    spent: int
    resets_at: datetime

    def message(self, now: datetime) -> str:
        whose = "your" if self.budget == "daily_tokens_per_user" else "this channel's"
        left = self.resets_at - now
        hours, minutes = divmod(max(int(left.total_seconds()) // 60, 1), 60)
        wait = f"{hours} h {minutes} min" if hours else f"{minutes} min"
        return (
            f"Not sent to the model: {whose} daily token budget is used up "
            f"({self.spent:,} of {self.limit:,} tokens today, `budgets.{self.budget}`). "
            f"It resets at 00:00 UTC, in {wait}. Anything waiting here stays as it is: continue it after the "
            "reset, or ask whoever runs the bot to raise the budget."
        )


def day_start(now: datetime) -> datetime:
    return now.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)


def stamp(when: datetime) -> str:
    """The operator log's time format (core.store.runs_model.utc_now)."""
    return when.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class BudgetCheck:
    """Whether a person's request in a channel may use the model now. Reads the operator log: call it off the loop."""

    def __init__(
        self,
        budgets: Budgets,
        log: OperatorLog,
        admins: frozenset[str] = frozenset(),
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self.budgets, self.operator_log, self.admins, self.clock = budgets, log, admins, clock

    @property
    def active(self) -> bool:
        return self.budgets.daily_tokens_per_user is not None or self.budgets.daily_tokens_per_channel is not None

    def refusal(self, person: str, channel: str) -> BudgetRefusal | None:
        if not self.active or (self.budgets.exempt_admins and person in self.admins):
            return None
        today = day_start(self.clock())
        checks: list[tuple[str, UsageBy, str, int | None]] = [
            ("daily_tokens_per_user", "user", person, self.budgets.daily_tokens_per_user),
            ("daily_tokens_per_channel", "channel", channel, self.budgets.daily_tokens_per_channel),
        ]
        for name, by, key, limit in checks:
            if limit is None or not key:
                continue
            spent = self.operator_log.tokens_spent(by, key, stamp(today))
            if spent >= limit:
                return BudgetRefusal(budget=name, limit=limit, spent=spent, resets_at=today + timedelta(days=1))
        return None
