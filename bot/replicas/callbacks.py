"""What the replica hand-over asks of the thread work, apart from the hand-over itself, so the thread
work can name it without loading the Postgres side (a single-process bot never imports psycopg)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from ..base.event import ThreadEvent
from ..base.thread import ThreadKey, ThreadRecord


class Lane(Protocol):
    """One thread's lane: the task running its jobs, if any, and the record the running job works on."""

    task: asyncio.Task[None] | None
    live: ThreadRecord | None


class Lanes(Protocol):
    """The local per-thread order (bot.threads.thread_worker): thread events run one at a time, in order."""

    def lane(self, key: ThreadKey) -> Lane | None: ...


@dataclass(frozen=True)
class HandoverCallbacks:
    """What the hand-over asks of this replica's thread work (connected at start-up)."""

    kick: Callable[[ThreadKey], None]  # drain the thread's events (its worker takes the lease with `hold`)
    control_signal: Callable[[ThreadEvent], None]  # a pause/stop for a run this replica may be pumping
    idle_run: Callable[[ThreadKey], Awaitable[str | None]]  # the thread's current run when nothing pumps it here
    resume_thread: Callable[[ThreadKey, str], Awaitable[None]]  # resume a run left `running`
    stop_local_runs: Callable[[], None]  # ask every run pumping here to stop
    take_outbox: Callable[[ThreadKey], Awaitable[None]] | None = None  # a thread just taken over: its outbox first
