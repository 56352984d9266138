"""Stores: where runs persist — files on disk or a shared Postgres database — and the operator log beside them
(each model call's usage, the decisions an operator is asked about).

`PostgresRuntimeStore` and `PostgresOperatorLog` load psycopg when first asked for: a bot without a database
never imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..store.fence import WRITE_FENCE, Fence
from ..store.files import RuntimeStore
from ..store.operator_log import AuditEntry, OperatorLog, UsageTotal

if TYPE_CHECKING:
    from ..store.database import connection_settings
    from ..store.operator_log_postgres import PostgresOperatorLog
    from ..store.postgres import PostgresRuntimeStore

__all__ = [
    "WRITE_FENCE", "AuditEntry", "Fence", "OperatorLog", "PostgresOperatorLog", "PostgresRuntimeStore", "RuntimeStore",
    "UsageTotal", "connection_settings",
]


def __getattr__(name: str) -> Any:
    if name == "PostgresRuntimeStore":
        return importlib.import_module("..store.postgres", __package__).PostgresRuntimeStore
    if name == "PostgresOperatorLog":
        return importlib.import_module("..store.operator_log_postgres", __package__).PostgresOperatorLog
    if name == "connection_settings":  # Postgres connection keywords every part of the product uses
        return importlib.import_module("..store.database", __package__).connection_settings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
