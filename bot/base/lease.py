"""The lease a thread's work holds while it runs: the thread and the epoch this replica took it at.

Set for the whole of a thread's drain (bot.replicas.handover), so every write the work makes for
the thread — its record, an outbox entry, the run's copy in Postgres — carries the epoch without
being handed it, and lands only while the epoch is still the thread's (see tables.FENCE_SQL).
Psycopg-free: the thread work imports it in a single process too.

What is sent to Slack straight away (status edits, streamed words) lands in no table, so it is fenced
here, in the process: once this replica learns that a lease passed on (a refused write, or taking stock
after an outage), the lease is marked lost, and a send made under it is dropped. An epoch, once
passed, is passed for every part of the process, so the record of lost leases is the process's own.
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


_LOST: dict[Lease, None] = {}  # leases known to have passed on, oldest first
KEPT_LOST = 10_000  # plenty: a lease lost long ago has no work left that could send under it


def mark_lost(lease: Lease) -> None:
    """Another replica holds the thread at a newer epoch: nothing more is sent under `lease`."""
    _LOST[lease] = None
    while len(_LOST) > KEPT_LOST:
        del _LOST[next(iter(_LOST))]


def still_held(lease: Lease | None) -> bool:
    """False once `lease` is known to have passed on (None: work that holds no lease, e.g. a single process)."""
    return lease is None or lease not in _LOST


HELD: ContextVar[Lease | None] = ContextVar("held_thread_lease", default=None)


def held_for(thread: str) -> Lease | None:
    """The lease the current work holds on `thread`, if it runs under one."""
    lease = HELD.get()
    return lease if lease is not None and lease.thread == thread else None
