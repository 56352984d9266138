"""Stores: where runs persist — files on disk or a shared Postgres database.

`PostgresRuntimeStore` loads psycopg when first asked for: a bot without a database never imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..store.files import RuntimeStore

if TYPE_CHECKING:
    from ..store.postgres import PostgresRuntimeStore

__all__ = ["PostgresRuntimeStore", "RuntimeStore"]


def __getattr__(name: str) -> Any:
    if name == "PostgresRuntimeStore":
        return importlib.import_module("..store.postgres", __package__).PostgresRuntimeStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
