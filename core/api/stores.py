"""Stores: where runs persist — files on disk or a shared Postgres database."""

from __future__ import annotations

from ..store.database import check_url, open_pool
from ..store.files import RuntimeStore
from ..store.postgres import PostgresRuntimeStore
from ..store.protocol import RunStore

__all__ = ["PostgresRuntimeStore", "RunStore", "RuntimeStore", "check_url", "open_pool"]
