"""Usage, budgets and the operator's audit: the operator log, who work is attributed to, and the budget check.

`PostgresOperatorLog` loads psycopg when first asked for, like `PostgresRuntimeStore`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..base.attribution import TERMINAL_CHANNEL, Attribution, attributed, current
from ..base.tracing import Tracing, tracing_from_env
from ..model.api import CallEnded, LLMReply
from ..run.budgets import BudgetCheck, BudgetRefusal, Budgets, day_start, stamp
from ..run.usage_meter import UsageMeter
from ..store.operator_log import AuditEntry, OperatorLog, SqliteOperatorLog, UsageBy, UsageEntry, UsageTotal
from ..store.operator_audit import OPERATOR_KINDS

if TYPE_CHECKING:
    from ..store.operator_log_postgres import PostgresOperatorLog

__all__ = [
    "OPERATOR_KINDS", "TERMINAL_CHANNEL", "Attribution", "CallEnded", "LLMReply", "AuditEntry", "BudgetCheck", "BudgetRefusal", "Budgets",
    "OperatorLog", "PostgresOperatorLog", "SqliteOperatorLog", "UsageBy", "UsageEntry", "UsageMeter", "UsageTotal", "attributed",
    "Tracing", "current", "day_start", "stamp", "tracing_from_env",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresOperatorLog":
        return importlib.import_module("..store.operator_log_postgres", __package__).PostgresOperatorLog
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
