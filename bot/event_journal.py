"""Thread events kept in a local sqlite file from before Slack gets its ack until they are safe
elsewhere, so a process that dies (even by kill -9) loses none of them. One class, two files that
never mix:

- `<home>/slack/journal.sqlite` (replicas): events taken while the database was away, until they
  can be queued in Postgres. Slack redelivers an event it got no answer for only after about a
  minute, then five; an owner's answer would wait that long after a short database outage. When
  the database is back they are queued in order, with their delivery ids, so a redelivery is
  still handled once (bot.replicas.handover).
- `<home>/slack/pending.sqlite` (embedded, no database): every event queued on a thread's lane,
  until the lane has run it (bot.threads.pending_events).

One worker thread of its own owns the connection (WAL), so a write never queues behind other thread
work, and each caller waits with a timeout. Writes that arrive while one is under way are committed
together in the next transaction (one fsync for a burst of events, not one each), so a burst of acks
stays fast. An event that cannot be written here is not acknowledged (Slack sends it again).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import TypeVar

from .base.event import ThreadEvent

log = logging.getLogger(__name__)

CALL_TIMEOUT = 5.0  # seconds a caller waits
LOCK_TIMEOUT = 2.0  # seconds sqlite waits for a lock: a locked file fails the call before the caller gives up

SCHEMA = """
CREATE TABLE IF NOT EXISTS journal (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    event TEXT NOT NULL,
    control TEXT
);
"""

Journaled = tuple[int, ThreadEvent, ThreadEvent | None]
T = TypeVar("T")
Change = tuple[str, str | None] | int  # (event, control) to add, or the seq of one that is done
Queued = tuple[Change, asyncio.Future[int]]


class EventJournal:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.count = 0  # events waiting here (as far as this process knows)
        self._queued: list[Queued] = []  # for the next transaction; shared with the worker thread
        self._lock = threading.Lock()  # guards _queued and _flushing
        self._flushing = False  # a flush is queued on (or running in) the worker thread
        # One worker thread owns the connection (sqlite wants one writer); nothing else waits in its queue.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="event-journal")
        self._db: sqlite3.Connection | None = None  # opened on first use; reopened after a failure

    async def add(self, event: ThreadEvent, control: ThreadEvent | None = None) -> int:
        """Keep the event; returns its place (for `done`). Raises OSError / sqlite3.Error / TimeoutError
        when it cannot be kept (then it is not acked)."""
        seq = await self._write((event.model_dump_json(), control.model_dump_json() if control is not None else None))
        self.count += 1
        return seq

    async def waiting(self) -> list[Journaled]:
        """What is kept, oldest first."""

        def read(db: sqlite3.Connection) -> list[tuple[int, str, str | None]]:
            return list(db.execute("SELECT seq, event, control FROM journal ORDER BY seq"))

        try:
            rows = await self._call(read)
        except (OSError, sqlite3.Error) as exc:  # not a journal we can read: nothing was kept in it either
            log.error("the local event journal cannot be read", extra={"path": str(self.path), "error": str(exc)})
            return []
        found: list[Journaled] = []
        unreadable: list[int] = []
        for seq, event, control in rows:
            try:
                found.append(
                    (seq, ThreadEvent.model_validate(json.loads(event)),
                     ThreadEvent.model_validate(json.loads(control)) if control else None)
                )
            except ValueError:
                unreadable.append(seq)  # written by another version: it would be skipped at every start
        self.count = len(rows)
        for seq in unreadable:
            log.error("a kept event cannot be read and is dropped", extra={"path": str(self.path), "seq": seq})
            await self.done(seq)
        return found

    async def done(self, seq: int) -> None:
        await self._write(seq)
        self.count = max(0, self.count - 1)

    async def close(self) -> None:
        """Close the file (at shutdown); what is kept stays kept."""

        def close(db: sqlite3.Connection) -> None:
            db.close()
            self._db = None

        if self._db is not None:
            await self._call(close, transaction=False)
        self._worker.shutdown(wait=False)

    async def _write(self, change: Change) -> int:
        """Queue `change` for the next transaction and wait for it. The worker thread settles the caller's
        future itself: no task in between, so a busy event loop adds as few turns as possible to an ack."""
        written: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        with self._lock:
            self._queued.append((change, written))
            start, self._flushing = not self._flushing, True
        if start:
            try:
                self._worker.submit(self._flush)
            except RuntimeError:  # closed: nothing can be kept any more
                with self._lock:
                    self._queued, self._flushing = [], False
                raise
        async with asyncio.timeout(CALL_TIMEOUT):  # a caller that gives up cancels only its wait
            return await written

    def _flush(self) -> None:
        """On the worker thread: commit what is queued, one transaction a round, until nothing is."""
        with ExitStack() as on_failure:  # a flush that dies lets the next add start another
            on_failure.callback(self._stop_flushing)
            while True:
                with self._lock:
                    batch, self._queued = self._queued, []
                    if not batch:
                        self._flushing = False
                        on_failure.pop_all()
                        return
                changes = [change for change, _ in batch]
                outcome: list[int] | OSError | sqlite3.Error
                try:
                    outcome = self._in_transaction(lambda db: _apply(db, changes))
                except (OSError, sqlite3.Error) as exc:
                    outcome = exc
                try:
                    batch[0][1].get_loop().call_soon_threadsafe(_settle, batch, outcome)
                except RuntimeError:  # the event loop is closed: nobody waits any more
                    pass

    def _stop_flushing(self) -> None:
        with self._lock:
            self._flushing = False

    async def _call(self, work: Callable[[sqlite3.Connection], T], *, transaction: bool = True) -> T:
        """`work` on the worker thread with the open connection (in one transaction), within CALL_TIMEOUT."""
        future = asyncio.get_running_loop().run_in_executor(
            self._worker, self._in_transaction if transaction else self._without_transaction, work
        )
        return await asyncio.wait_for(future, CALL_TIMEOUT)

    def _in_transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        db = self._db or self._open()
        try:
            with db:
                return work(db)
        except sqlite3.Error:
            db.close()  # a fresh connection next time (the file may have been replaced or repaired)
            self._db = None
            raise

    def _without_transaction(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return work(self._db or self._open())

    def _open(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(str(self.path), timeout=LOCK_TIMEOUT, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # WAL: a commit survives a kill -9 (a power cut may lose the last)
            db.executescript(SCHEMA)
        except sqlite3.Error:
            db.close()
            raise
        self._db = db
        return db


def _settle(batch: list[Queued], outcome: list[int] | OSError | sqlite3.Error) -> None:
    """On the event loop: each caller gets its seq, or the error (a fresh one each) that kept it out."""
    for index, (_, written) in enumerate(batch):
        if written.done():  # its caller gave up waiting
            continue
        if isinstance(outcome, list):
            written.set_result(outcome[index])
        else:
            written.set_exception(type(outcome)(*outcome.args))


def _apply(db: sqlite3.Connection, changes: list[Change]) -> list[int]:
    """The seq of each event added, 0 for each one done."""
    seqs: list[int] = []
    for change in changes:
        if isinstance(change, int):
            db.execute("DELETE FROM journal WHERE seq = ?", (change,))
            seqs.append(0)
        else:
            cursor = db.execute("INSERT INTO journal (event, control) VALUES (?, ?)", change)
            seqs.append(int(cursor.lastrowid or 0))
    return seqs
