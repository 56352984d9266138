"""The inbox on a local SQLite file, so a process that dies (even by kill -9) loses no thread work
Slack was told it has. Two files that never mix, one table (bot.inbox.records):

- `<home>/slack/inbox.sqlite` (embedded, no database): every thread event, until the thread's worker has
  run it (bot.threads.thread_worker); a start runs what is still waiting. One process owns every thread
  in it, so what waits is also kept in memory, per thread, and taking the next event costs no read.
- `<home>/slack/away-inbox.sqlite` (replicas): events taken while the database was away, until they
  are forwarded to the Postgres inbox (bot.replicas.handover). Slack redelivers an event it got no
  answer for only after about a minute, then five; an owner's answer would wait that long after a
  short outage otherwise.

What still waits in the file an earlier version kept instead (`pending.sqlite`, `journal.sqlite`:
`earlier`) is taken over when the inbox first opens, and that file removed.

One worker thread of its own owns the connection (WAL), so a write never queues behind other thread
work, and each caller waits with a timeout. Writes that arrive while one is under way are committed
together in the next transaction (one fsync for a burst of events, not one each), so a burst of acks
stays fast. An event that cannot be written here is not acknowledged (Slack sends it again).

The embedded inbox's rows are also its events' dedupe claims (bot.inbox.records, bot.threads.event_claim):
one process owns every thread, so a claim here is final when it is made. Claims run on the same
worker thread, so two claims of one delivery never interleave.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any, TypeVar

from ..base.event import REDELIVERY_WINDOW, ThreadEvent
from ..base.lease import Lease
from ..base.thread import ThreadKey
from .records import (
    CLAIMED_ROW_COLUMNS, MARK_DONE, PRUNE, PRUNE_KEYS, SQLITE, SQLITE_CLAIM_COLUMNS, WAITING, Queued, add_key_statement,
    add_statement, claim_statements, claimed_row, compiled, new_row, read_row, sqlite_ddl, sqlite_insert,
    sqlite_keys_match,
)

log = logging.getLogger(__name__)

CALL_TIMEOUT = 5.0  # seconds a caller waits
LOCK_TIMEOUT = 2.0  # seconds sqlite waits for a lock: a locked file fails the call before the caller gives up
PRUNE_EVERY = 60.0  # seconds between two prunes of rows whose redelivery window has passed

T = TypeVar("T")
Change = dict[str, Any] | int  # a row to add, or the seq of one that is done
Pending = tuple[Change, asyncio.Future[int | None]]
ADD, ADD_CLAIMED, ADD_KEY, DONE, DROP_OLD, DROP_KEYS, READ_WAITING = (
    compiled(statement, SQLITE)
    for statement in (
        add_statement(sqlite_insert), add_statement(sqlite_insert, CLAIMED_ROW_COLUMNS), add_key_statement(sqlite_insert),
        MARK_DONE, PRUNE, PRUNE_KEYS, WAITING,
    )
)
CLAIM, FOUND, CLAIMED, SETTLE = (compiled(statement, SQLITE) for statement in claim_statements(sqlite_keys_match()))
SCHEMA = sqlite_ddl()


class FileInbox:
    def __init__(self, path: Path, *, earlier: Path | None = None, redelivery_window: float = REDELIVERY_WINDOW) -> None:
        self.path = path
        self.earlier = earlier
        self.redelivery_window = redelivery_window
        self._waiting_since: dict[int, float] = {}  # the rows waiting here (as far as this process knows): when queued
        self._by_thread: dict[str, deque[Queued]] = {}  # what waits for each thread's worker, oldest first
        self._on_control: Callable[[ThreadEvent], None] | None = None  # see listen
        self._queued: list[Pending] = []  # for the next transaction; shared with the worker thread
        self._lock = threading.Lock()  # guards _queued and _flushing
        self._flushing = False  # a flush is queued on (or running in) the worker thread
        self._pruned = -math.inf  # monotonic time of the last prune (worker thread only): the first write prunes
        # One worker thread owns the connection (sqlite wants one writer); nothing else waits in its queue.
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="file-inbox")
        self._db: sqlite3.Connection | None = None  # opened on first use; reopened after a failure

    async def add(self, event: ThreadEvent, control: ThreadEvent | None = None) -> int | None:
        """Keep the event; returns its seq (for `done`), or None when its delivery is here already (a
        redelivery: nothing is queued, Slack still gets its ack). Raises OSError / sqlite3.Error /
        TimeoutError when it cannot be kept (then it is not acked)."""
        row = new_row(event, control, ThreadEvent.model_dump_json)
        seq = await self._write(row)
        if seq is not None:
            self._waiting_since[seq] = row["queued_at"]
        return seq

    @property
    def waiting_count(self) -> int:
        return len(self._waiting_since)

    def oldest_waiting(self) -> float | None:
        """When the oldest event still waiting here was queued (None: none waits)."""
        return min(self._waiting_since.values(), default=None)

    def listen(self, on_control: Callable[[ThreadEvent], None]) -> None:
        """Where the control pushed with an event goes once it is kept (a pause/stop for the run pumping in
        the thread): the replicas' NOTIFY does the same across processes."""
        self._on_control = on_control

    async def push(self, event: ThreadEvent, control: ThreadEvent | None = None) -> bool:
        """Keep the event for its thread's worker and pass `control` on; False (nothing queued or passed on)
        for a delivery the inbox has already. Raises when it cannot be kept (see `add`)."""
        seq = await self.add(event, control)
        if seq is None:
            return False
        self._by_thread.setdefault(event.thread, deque()).append(Queued(seq, event, control))
        if control is not None and self._on_control is not None:
            self._on_control(control)
        return True

    async def next_for(self, lease: Lease) -> tuple[int, ThreadEvent | None] | None:
        """The thread's oldest waiting event, taken out of memory; None when nothing waits."""
        waiting = self._by_thread.get(lease.thread)
        if not waiting:
            return None
        queued = waiting.popleft()
        if not waiting:
            del self._by_thread[lease.thread]
        return queued.seq, queued.event

    async def has_waiting(self, key: ThreadKey) -> bool:
        return str(key) in self._by_thread

    async def load(self) -> list[ThreadKey]:
        """At start: what a previous process kept and did not finish waits for its thread's worker again.
        Returns those threads, by their oldest event."""
        self._by_thread.clear()
        for queued in await self.waiting():
            self._by_thread.setdefault(queued.event.thread, deque()).append(queued)
        return [key for key in map(ThreadKey.parse, self._by_thread) if key is not None]

    async def waiting(self) -> list[Queued]:
        """What waits, oldest first; a row another version wrote that cannot be read is marked done."""
        try:
            rows = await self._call(lambda db: list(db.execute(READ_WAITING.sql, READ_WAITING.fixed)))
        except (OSError, sqlite3.Error) as exc:  # not a file we can read: nothing was kept in it either
            log.error("the local inbox cannot be read", extra={"path": str(self.path), "error": str(exc)})
            return []
        found: list[Queued] = []
        since: dict[int, float] = {}
        for seq, event, control, queued_at in rows:
            if (queued := read_row(seq, event, control)) is not None:
                found.append(queued)
                since[queued.seq] = float(queued_at)
            else:
                log.error("a kept event cannot be read and is dropped", extra={"path": str(self.path), "seq": seq})
                await self.done(None, seq)
        last = max((int(row[0]) for row in rows), default=0)  # what was kept while the file was read stays counted
        self._waiting_since = {**since, **{seq: at for seq, at in self._waiting_since.items() if seq > last}}
        return found

    async def done(self, lease: Lease | None, seq: int) -> None:
        """The row's work is done: it stays for the redelivery window (a late redelivery finds it). No
        lease is checked: one process owns every thread here. When the file cannot say so, the event
        runs again at the next start, and its claim makes that a no-op."""
        try:
            await self._write(seq)
        except (OSError, sqlite3.Error, TimeoutError) as exc:
            log.warning(
                "a handled thread event is still kept as waiting", extra={"path": str(self.path), "error": str(exc)}
            )
            return
        self._waiting_since.pop(seq, None)

    # ---- claims (bot.threads.event_claim.ClaimStore) ------------------------------------------

    async def claim(self, event: ThreadEvent, *, final: bool = False) -> bool:
        """Decide the event's row, found by any of its keys; False when it was decided before. An event
        that never passed through the inbox gets a row now, done and claimed."""

        def claim(db: sqlite3.Connection) -> bool:
            args = _claim_args(event.dedupe, claim_time=time.time(), claim_epoch=None, held_epoch=None, held_thread=None)
            if db.execute(CLAIM.sql, CLAIM.args(args)).fetchall():
                return True
            if db.execute(FOUND.sql, FOUND.args(args)).fetchone() is not None:
                return False
            row = claimed_row(event, ThreadEvent.model_dump_json, None)
            return _add(db, ADD_CLAIMED, row) is not None

        return await self._call(claim)

    async def seen(self, keys: list[str]) -> bool:
        """True when the row of any of `keys` was decided (a redelivery, maybe from before a restart)."""
        return await self._call(lambda db: db.execute(CLAIMED.sql, CLAIMED.args(_claim_args(keys))).fetchone() is not None)

    async def settle(self, keys: list[str]) -> None:
        """The rows of `keys` count as handled, for good (their effect is durable)."""
        args = _claim_args(keys, claim_time=time.time())
        await self._call(lambda db: db.execute(SETTLE.sql, SETTLE.args(args)))

    async def close(self) -> None:
        """Close the file (at shutdown); what waits stays kept."""

        def close(db: sqlite3.Connection) -> None:
            db.close()
            self._db = None

        if self._db is not None:
            await self._call(close, transaction=False)
        self._worker.shutdown(wait=False)

    async def _write(self, change: Change) -> int | None:
        """Queue `change` for the next transaction and wait for it. The worker thread settles the caller's
        future itself: no task in between, so a busy event loop adds as few turns as possible to an ack."""
        written: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
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
                outcome: list[int | None] | OSError | sqlite3.Error
                try:
                    outcome = self._in_transaction(lambda db: self._apply(db, changes))
                except (OSError, sqlite3.Error) as exc:
                    outcome = exc
                try:
                    batch[0][1].get_loop().call_soon_threadsafe(_settle, batch, outcome)
                except RuntimeError:  # the event loop is closed: nobody waits any more
                    pass

    def _apply(self, db: sqlite3.Connection, changes: list[Change]) -> list[int | None]:
        """The seq of each row added (None for a delivery already here), None for each one done; rows
        whose redelivery window passed go at most once every PRUNE_EVERY seconds."""
        seqs: list[int | None] = []
        now = time.time()
        for change in changes:
            if isinstance(change, int):
                db.execute(DONE.sql, {"done_seq": change, "done_time": now})
                seqs.append(None)
            else:
                seqs.append(_add(db, ADD, change))
        if time.monotonic() - self._pruned > PRUNE_EVERY:
            self._pruned = time.monotonic()
            db.execute(DROP_OLD.sql, {"done_before": now - self.redelivery_window})
            db.execute(DROP_KEYS.sql, DROP_KEYS.fixed)
        return seqs

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
            _add_claim_columns(db)
            db.executescript(SCHEMA)
            if self.earlier is not None and self.earlier.exists():
                with db:
                    taken = _take_over(db, self.earlier)
                _remove(self.earlier)  # after the commit: a crash before it takes it over again, nothing twice
                log.info("took over the events an earlier version kept", extra={"path": str(self.earlier), "count": taken})
        except sqlite3.Error:
            db.close()
            raise
        self._db = db
        return db


def _take_over(db: sqlite3.Connection, earlier: Path) -> int:
    """Queue what waits in an earlier version's journal file (table `journal`: seq, event, control)."""
    with closing(sqlite3.connect(str(earlier), timeout=LOCK_TIMEOUT)) as old:
        try:
            rows = old.execute("SELECT event, control FROM journal ORDER BY seq").fetchall()
        except sqlite3.OperationalError:  # not such a file: nothing to take over
            return 0
    taken = 0
    for event, control in rows:
        try:
            row = new_row(
                ThreadEvent.model_validate_json(event),
                ThreadEvent.model_validate_json(control) if control else None,
                ThreadEvent.model_dump_json,
            )
        except ValueError:
            continue
        taken += _add(db, ADD, row) is not None
    claimed = _claimed_earlier(earlier.with_name("seen.sqlite"))
    if claimed:  # decided by the earlier version before it stopped: not handled again
        db.execute(SETTLE.sql, SETTLE.args(_claim_args(claimed, claim_time=time.time())))
    return taken


def _claimed_earlier(seen: Path) -> list[str]:
    """The keys an earlier version recorded as handled (`seen.sqlite`, table `seen`), if it kept them."""
    if not seen.exists():
        return []
    with closing(sqlite3.connect(str(seen), timeout=LOCK_TIMEOUT)) as old:
        try:
            return [str(key) for (key,) in old.execute('SELECT key FROM "seen"')]
        except sqlite3.OperationalError:  # not such a file
            return []


def _add(db: sqlite3.Connection, add: Any, row: dict[str, Any]) -> int | None:
    """Insert the row unless its delivery is here, and its keys in any case (a redelivery may bring a new
    one); the new row's seq, or None."""
    added = db.execute(add.sql, add.args(row)).fetchone()
    db.executemany(ADD_KEY.sql, [{"row_key": key, "delivery": row["delivery"]} for key in row["row_keys"]])
    return int(added[0]) if added is not None else None


def _claim_args(keys: list[str], **values: Any) -> dict[str, Any]:
    return {"claim_keys": json.dumps(keys), **values}


def _add_claim_columns(db: sqlite3.Connection) -> None:
    """A file written before the inbox carried claims gets their columns (its rows count as undecided)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(crew_inbox)")}
    if columns:
        for name, kind in SQLITE_CLAIM_COLUMNS.items():
            if name not in columns:
                db.execute(f"ALTER TABLE crew_inbox ADD COLUMN {name} {kind}")


def _remove(earlier: Path) -> None:
    for path in (earlier, earlier.with_name(earlier.name + "-wal"), earlier.with_name(earlier.name + "-shm")):
        path.unlink(missing_ok=True)


def _settle(batch: list[Pending], outcome: list[int | None] | OSError | sqlite3.Error) -> None:
    """On the event loop: each caller gets its seq, or the error (a fresh one each) that kept it out."""
    for index, (_, written) in enumerate(batch):
        if written.done():  # its caller gave up waiting
            continue
        if isinstance(outcome, list):
            written.set_result(outcome[index])
        else:
            written.set_exception(type(outcome)(*outcome.args))
