"""RuntimeStore over Postgres: the run index and every run's files live in the shared database.

The local run folders under the home stay the engine's working copy: each write to them (an atomic
state write, a log line) is copied to Postgres as it happens, in the same order, before the writer
goes on (core.atomic mirrors). A replica that takes a thread over rebuilds the run's folder from
Postgres (`materialise`) and goes on from there, exactly as a restarted single process would from
its disk.

A copied write is one round trip to Postgres on the writer's thread, the event loop included (as
the local write before it is a system call there): the log line must be shared before the pump
posts what it says, or a replica resuming the run would post it again.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool
from pydantic import ValidationError

from .atomic import add_mirror, remove_mirror
from .errors import CrewError
from .runs_model import RunRecord
from .store import RuntimeStore


class PostgresRuntimeStore(RuntimeStore):
    def __init__(self, pool: ConnectionPool, home: Path | None = None) -> None:
        super().__init__(home)
        self.pool = pool
        self._runs_prefix = os.path.join(self._home_str, "projects", "")
        add_mirror(os.path.join(self._home_str, "projects"), self._mirror)

    def close(self) -> None:
        remove_mirror(self._mirror)

    # ---- run index ---------------------------------------------------------

    def read_index(self) -> dict[str, RunRecord]:
        with self.pool.connection() as conn:
            rows = conn.execute("SELECT run_id, data FROM crew_runs").fetchall()
        records: dict[str, RunRecord] = {}
        for run_id, data in rows:
            try:
                records[run_id] = RunRecord.model_validate(data)
            except ValidationError:
                continue  # one bad entry must not hide every other run
        return records

    def read_record(self, run_id: str) -> RunRecord | None:
        with self.pool.connection() as conn:
            row = conn.execute("SELECT data FROM crew_runs WHERE run_id = %s", (run_id,)).fetchone()
        if row is None:
            return None
        try:
            return RunRecord.model_validate(row[0])
        except ValidationError:
            return None

    def save_record(self, record: RunRecord) -> None:
        item = record.model_dump(mode="json")
        try:
            with self.pool.connection() as conn:
                conn.execute(
                    "INSERT INTO crew_runs (run_id, phase, data) VALUES (%s, %s, %s) "
                    "ON CONFLICT (run_id) DO UPDATE SET phase = EXCLUDED.phase, data = EXCLUDED.data",
                    (record.run_id, str(record.phase.value), Jsonb(item)),
                )
        except Exception as exc:
            raise CrewError(
                "RUNS_INDEX_WRITE_FAILED", f"Could not save the run in the database ({type(exc).__name__})."
            ) from None

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
        if where is None:
            return
        run_id, rel = where
        with self.pool.connection() as conn:
            if replaced:
                with conn.transaction():
                    conn.execute("DELETE FROM crew_run_lines WHERE run_id = %s AND rel = %s", (run_id, rel))
                    conn.execute(
                        "INSERT INTO crew_run_files (run_id, rel, content) VALUES (%s, %s, %s) "
                        "ON CONFLICT (run_id, rel) DO UPDATE SET content = EXCLUDED.content",
                        (run_id, rel, data),
                    )
            else:
                conn.execute(
                    "INSERT INTO crew_run_lines (run_id, rel, line) VALUES (%s, %s, %s)", (run_id, rel, data)
                )

    def materialise(self, record: RunRecord) -> None:
        """Rebuild the run's local folder from Postgres (another replica may have gone on with it)."""
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
