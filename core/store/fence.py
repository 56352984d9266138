"""The fence a store write is made under: a condition in SQL that must still hold where the write
lands (e.g. "this replica still holds the thread at this epoch"). Psycopg-free, so work that sets
a fence loads nothing of the database side."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any, NamedTuple


class Fence(NamedTuple):
    """A condition in SQL (with its parameters) that must hold for a write to land."""

    condition: str
    params: tuple[Any, ...]


WRITE_FENCE: ContextVar[Fence | None] = ContextVar("run_write_fence", default=None)
"""The fence of the work writing now: every write it queues is copied only while the fence holds."""
