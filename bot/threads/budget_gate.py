"""Refuses a request that would use the model once its person's or channel's daily token budget is spent.

The refusal is a notice in the thread (which budget, how much was used, when it resets) and a
`budget.refused` row in the operator log; nothing reaches the session, so a run waiting in the
thread is left exactly as it was and goes on once the budget allows.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from datetime import datetime, timezone

from crewagent.core.api.errors import CrewError
from crewagent.core.api.runs import BudgetCheck
from crewagent.core.api.stores import AuditEntry, OperatorLog

from ..render import blocks
from ..outgoing import Post
from ..base.thread import ThreadRecord
from ..slack_port import SlackPort

log = logging.getLogger(__name__)
CHECK_TIMEOUT = 10.0  # seconds a budget look-up may take before the request goes ahead unchecked


class BudgetGate:
    def __init__(self, check: BudgetCheck, operator_log: OperatorLog, io: SlackPort) -> None:
        self.check, self.operator_log, self.io = check, operator_log, io

    async def refused(self, record: ThreadRecord, user: str) -> bool:
        """True when `user`'s request in the thread was refused (and the thread told why)."""
        if not self.check.active:
            return False
        key = record.key
        try:
            refusal = await asyncio.wait_for(asyncio.to_thread(self.check.refusal, user, key.channel), CHECK_TIMEOUT)
        except (TimeoutError, OSError, sqlite3.Error, CrewError) as exc:  # a slow or lost database stops nobody
            log.warning("the budget check failed; the request goes ahead", extra={"error": type(exc).__name__})
            return False
        if refusal is None:
            return False
        entry = AuditEntry(
            person=user,
            channel=key.channel,
            run_id=record.session.run_id,
            kind="budget.refused",
            detail={"budget": refusal.budget, "limit": refusal.limit, "spent": refusal.spent},
        )
        await asyncio.to_thread(self.operator_log.add_audit, entry)
        log.info("request refused by a budget", extra={"user": user, "budget": refusal.budget})
        await self.io.send(Post(key.channel, key.thread_ts, blocks.notice(refusal.message(datetime.now(timezone.utc)))))
        return True
