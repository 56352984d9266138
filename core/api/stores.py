"""Stores: where runs persist — files on disk or a shared Postgres database.

The Postgres names load psycopg when first asked for: a bot without a database never imports it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ..store.files import RuntimeStore

if TYPE_CHECKING:
    from ..store.database import check_url, open_pool
    from ..store.postgres import PostgresRuntimeStore

_ON_FIRST_USE = {"check_url": "..store.database", "open_pool": "..store.database", "PostgresRuntimeStore": "..store.postgres"}

__all__ = ["PostgresRuntimeStore", "RuntimeStore", "check_url", "open_pool"]


def __getattr__(name: str) -> Any:
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module(_ON_FIRST_USE[name], __package__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
