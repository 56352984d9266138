"""The lease a thread's work holds while it runs: the thread and the epoch this replica took it at.

Set for the whole of a thread's drain (bot.replicas.handover), so every write the work makes for
the thread — its record, an outbox entry, the run's copy in Postgres — carries the epoch without
being handed it, and lands only while the epoch is still the thread's (see tables.FENCE_SQL).
Psycopg-free: the thread work imports it in a single process too.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import NamedTuple


class Lease(NamedTuple):
    thread: str  # str(ThreadKey)
    epoch: int


class LeaseLost(Exception):
    """A write for a thread was refused: another replica took the thread over (a newer epoch). The
    thread is no longer ours: its work stops quietly and sends nothing more."""

    def __init__(self, thread: str) -> None:
        super().__init__(f"the lease of {thread} passed to another replica")
        self.thread = thread


HELD: ContextVar[Lease | None] = ContextVar("held_thread_lease", default=None)


def held_for(thread: str) -> Lease | None:
    """The lease the current work holds on `thread`, if it runs under one."""
    lease = HELD.get()
    return lease if lease is not None and lease.thread == thread else None
