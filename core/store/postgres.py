"""RuntimeStore over Postgres: the run index and every run's files live in the shared database.

The local run folders under the home stay the engine's working copy: each write to them (an atomic
state write, a log line) and each run index save is queued, in order, for one writer thread that
copies it to Postgres in batches (one transaction per batch), so the pump never waits on the network.
`flush()` waits until everything written so far is in Postgres: the bot calls it before anything
reaches Slack and before it hands a thread to another replica, so a replica that resumes a run
after a crash never repeats a message the user has seen. A replica that takes a thread over
rebuilds the run's folder from Postgres (`materialise`) and goes on from there, exactly as a
restarted single process would from its disk.

Each write is copied under the fence it was queued under (core.store.fence, set by whoever drives
the run): the statement itself checks it, so a write from someone who lost the run never lands. Appended lines carry an id
of their own, so a batch committed again after an answer that was lost writes each line once.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Collection
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool
from pydantic import ValidationError

from ..base.atomic import add_mirror, remove_mirror
from .database import open_pool
from .fence import WRITE_FENCE, Fence
from .runs_model import RunRecord
from .files import RuntimeStore
from .operator_log_postgres import PostgresOperatorLog

log = logging.getLogger(__name__)

FLUSH_TIMEOUT = 30.0  # seconds a flush waits for an unreachable database before giving up
_RETRY_SECONDS = 0.5


@dataclass(frozen=True)
class _Write:
    kind: str  # "file" | "line" | "record" | "operator_log"
    run_id: str
    rel: str = ""
    data: bytes = b""
    record: dict[str, Any] | None = None
    phase: str = ""
    row: tuple[Any, ...] = ()  # an "operator_log" write's parameters (its statement is `rel`)
    fence: Fence | None = field(default_factory=WRITE_FENCE.get)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)  # a line lands once, however often it is sent


class PostgresRuntimeStore(RuntimeStore):
    @classmethod
    def open(cls, url: str, home: Path | None = None, *, schema: str = "", max_size: int = 8) -> PostgresRuntimeStore:
        """Check the URL, ensure the run tables and `schema`, and open the store on its own pool (`.pool`).
        Raises CrewError for a bad URL or an unreachable database."""
        pool = open_pool(url, max_size=max_size, schema=schema)
        with ExitStack() as on_failure:
            on_failure.callback(pool.close)
            store = cls(pool, home)
            on_failure.pop_all()
        return store

    def __init__(self, pool: ConnectionPool, home: Path | None = None) -> None:
        super().__init__(home)
        self.pool = pool
        self._runs_prefix = os.path.join(self._home_str, "projects", "")
        self._queue: list[_Write] = []
        self._queued = 0  # writes ever queued
        self._written = 0  # writes ever committed to Postgres
        self._unsaved: dict[str, dict[str, Any]] = {}  # records queued, not yet committed (read your writes)
        self._changed = threading.Condition()
        self._closing = False
        self._writer = threading.Thread(target=self._write_loop, name="crewagent-pg-writer", daemon=True)
        self._writer.start()
        add_mirror(os.path.join(self._home_str, "projects"), self._mirror)

    def _open_operator_log(self) -> PostgresOperatorLog:
        """Usage and audit rows in the shared database, queued with the run writes (never dropped with a run)."""
        return PostgresOperatorLog(self.pool, lambda statement, row: self._enqueue(_Write("operator_log", "", statement, row=row)))

    def close(self) -> None:
        """Stop copying writes (after copying every queued one)."""
        remove_mirror(self._mirror)
        self.flush()
        with self._changed:
            self._closing = True
            self._changed.notify_all()
        self._writer.join(FLUSH_TIMEOUT)

    # ---- the writer ----------------------------------------------------------

    def _enqueue(self, write: _Write) -> None:
        with self._changed:
            self._queue.append(write)
            self._queued += 1
            if write.record is not None:
                self._unsaved[write.run_id] = write.record
            self._changed.notify_all()

    def pending(self) -> bool:
        return self._written < self._queued

    def flush(self, timeout: float = FLUSH_TIMEOUT) -> bool:
        """Wait until every write queued so far is in Postgres; False if that took over `timeout`."""
        with self._changed:
            target = self._queued
            done = self._changed.wait_for(lambda: self._written >= target, timeout)
        if not done:
            log.error("the database did not take the run writes in time", extra={"waiting": target - self._written})
        return done

    def _write_loop(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._closing)
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            while True:
                try:
                    self._commit(batch)
                    break
                except psycopg.Error:  # a commit whose answer was lost may have landed: lines have ids
                    log.warning("could not copy run writes to the database; retrying", exc_info=True)
                    time.sleep(_RETRY_SECONDS)
            with self._changed:
                self._written += len(batch)  # refused (fenced) writes count as done: nobody waits for them
                for write in batch:
                    if write.record is not None and self._unsaved.get(write.run_id) is write.record:
                        del self._unsaved[write.run_id]
                self._changed.notify_all()

    def _commit(self, batch: list[_Write]) -> None:
        """Copy the batch in one transaction; a write whose fence no longer holds is left out by its statement."""
        with self.pool.connection() as conn, conn.transaction(), conn.pipeline():
            self._copy(conn, batch)

    @staticmethod
    def _copy(conn: psycopg.Connection[Any], batch: list[_Write]) -> None:
        for w in batch:
            fence, fenced = (w.fence.condition, w.fence.params) if w.fence is not None else ("true", ())
            if w.kind == "record":
                conn.execute(
                    "INSERT INTO crew_runs (run_id, phase, data) SELECT %s, %s, %s WHERE " + fence
                    + " ON CONFLICT (run_id) DO UPDATE SET phase = EXCLUDED.phase, data = EXCLUDED.data",
                    (w.run_id, w.phase, Jsonb(w.record), *fenced),
                )
            elif w.kind == "file":
                conn.execute(
                    "DELETE FROM crew_run_lines WHERE run_id = %s AND rel = %s AND " + fence, (w.run_id, w.rel, *fenced)
                )
                conn.execute(
                    "INSERT INTO crew_run_files (run_id, rel, content) SELECT %s, %s, %s WHERE " + fence
                    + " ON CONFLICT (run_id, rel) DO UPDATE SET content = EXCLUDED.content",
                    (w.run_id, w.rel, w.data, *fenced),
                )
            elif w.kind == "operator_log":
                conn.execute(w.rel, w.row)  # type: ignore[arg-type]
            else:
                conn.execute(
                    "INSERT INTO crew_run_lines (run_id, rel, line, write_id) SELECT %s, %s, %s, %s WHERE " + fence
                    + " ON CONFLICT (write_id) DO NOTHING",
                    (w.run_id, w.rel, w.data, w.id, *fenced),
                )

    # ---- run index ---------------------------------------------------------

    def read_index(self) -> dict[str, RunRecord]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT run_id, data FROM crew_runs").fetchall()
        with self._changed:
            items = {**{run_id: data for run_id, data in rows}, **self._unsaved}
        return RunRecord.valid_entries(items)

    def entries_of_sessions(self, session_ids: Collection[str]) -> dict[str, dict[str, Any]]:
        """The runs these conversations started (an indexed query), with writes not yet copied; not validated."""
        wanted = sorted(set(session_ids))
        if not wanted:
            return {}
        with self.pool.connection() as conn:
            rows = conn.execute(
                "SELECT run_id, data FROM crew_runs WHERE data->>'session_id' = ANY(%s)", (wanted,)
            ).fetchall()
        with self._changed:
            unsaved = {k: v for k, v in self._unsaved.items() if v.get("session_id") in wanted}
        return {**{run_id: data for run_id, data in rows}, **unsaved}

    def read_record(self, run_id: str) -> RunRecord | None:
        with self._changed:
            data = self._unsaved.get(run_id)
        if data is None:
            with self.pool.connection() as conn:
                row = conn.execute("SELECT data FROM crew_runs WHERE run_id = %s", (run_id,)).fetchone()
            if row is None:
                return None
            data = row[0]
        try:
            return RunRecord.model_validate(data)
        except ValidationError:
            return None

    def save_record(self, record: RunRecord) -> None:
        item = record.model_dump(mode="json")
        self._enqueue(_Write("record", record.run_id, record=item, phase=str(record.phase.value)))

    # ---- run files ---------------------------------------------------------

    def _where(self, path: str) -> tuple[str, str] | None:
        """(run id, path inside the run folder) for a path under projects/<pid>/runs/<run id>/."""
        if not path.startswith(self._runs_prefix):
            return None
        parts = path[len(self._runs_prefix) :].split(os.sep)
        if len(parts) < 4 or parts[1] != "runs":
            return None
        return parts[2], "/".join(parts[3:])

    def _mirror(self, path: str, data: bytes, replaced: bool) -> None:
        where = self._where(path)
        if where is not None:
            self._enqueue(_Write("file" if replaced else "line", where[0], where[1], data))

    def materialise(self, record: RunRecord) -> None:
        """Rebuild the run's local folder from Postgres (another replica may have gone on with it)."""
        self.flush()
        with self.pool.connection() as conn:
            files = conn.execute(
                "SELECT rel, content FROM crew_run_files WHERE run_id = %s", (record.run_id,)
            ).fetchall()
            lines = conn.execute(
                "SELECT rel, line FROM crew_run_lines WHERE run_id = %s ORDER BY seq", (record.run_id,)
            ).fetchall()
        run_dir = self.run_dir(record)
        fresh = run_dir.with_name(f".{run_dir.name}.materialising")
        shutil.rmtree(fresh, ignore_errors=True)
        (fresh / "state" / "logs").mkdir(parents=True)
        contents: dict[str, bytearray] = {rel: bytearray(content) for rel, content in files}
        for rel, line in lines:
            contents.setdefault(rel, bytearray()).extend(line)
        for rel, content in contents.items():
            target = fresh.joinpath(*rel.split("/"))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(bytes(content))
        (fresh / "state" / "logs" / "execution.jsonl").touch()
        shutil.rmtree(run_dir, ignore_errors=True)
        os.replace(fresh, run_dir)
        if record.child_run_id:  # a sub-workflow in progress goes on through its caller: its folder too
            child = self.read_record(record.child_run_id)
            if child is not None and child.parent_run_id == record.run_id:
                self.materialise(child)

    def import_run_dir(self, record: RunRecord, run_dir: Path) -> int:
        """Copy an embedded store's run folder into Postgres (migration); returns the files copied."""
        copied = 0
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("DELETE FROM crew_run_files WHERE run_id = %s", (record.run_id,))
            conn.execute("DELETE FROM crew_run_lines WHERE run_id = %s", (record.run_id,))
            for path in sorted(run_dir.rglob("*")):
                if path.is_file() and not path.name.startswith("."):
                    rel = path.relative_to(run_dir).as_posix()
                    conn.execute(
                        "INSERT INTO crew_run_files (run_id, rel, content) VALUES (%s, %s, %s)",
                        (record.run_id, rel, path.read_bytes()),
                    )
                    copied += 1
        return copied
