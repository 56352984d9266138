"""The operator log: what each model call cost and who decided what, kept apart from the runs.

Runs keep their own logs (execution.jsonl); an operator asks across runs: "who used how many tokens
this week", "who approved that command". Those questions need a table, so every model call's usage
and every operator-relevant decision (approvals, Confirms, deliveries, budget refusals) is also one
row here, with the person and the channel it was for. One schema, two backends: `SqliteOperatorLog`
beside the embedded store's files, and the Postgres one (core.store.operator_log_postgres) for replicas.

Times are UTC ISO-8601 text (`2026-01-02T03:04:05.678Z`), which sorts as it reads in both backends.
"""

from __future__ import annotations

import json
import logging
import queue
import sqlite3
import threading
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

from .runs_model import utc_now

log = logging.getLogger(__name__)

OPERATOR_LOG_FILE = "operator-log.sqlite"
UsageBy = Literal["user", "channel"]
_BY_COLUMN: dict[str, str] = {"user": "person", "channel": "channel"}

SCHEMA_STATEMENTS = (
    """CREATE TABLE IF NOT EXISTS crew_usage (
        at text NOT NULL, person text NOT NULL, channel text NOT NULL, run_id text,
        model text NOT NULL, input_tokens bigint NOT NULL, output_tokens bigint NOT NULL,
        cached_tokens bigint NOT NULL DEFAULT 0, estimated boolean NOT NULL DEFAULT false)""",
    "CREATE INDEX IF NOT EXISTS crew_usage_by_person ON crew_usage (person, at)",
    "CREATE INDEX IF NOT EXISTS crew_usage_by_channel ON crew_usage (channel, at)",
    """CREATE TABLE IF NOT EXISTS crew_audit (
        at text NOT NULL, person text NOT NULL, channel text NOT NULL, run_id text,
        kind text NOT NULL, detail text NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS crew_audit_by_at ON crew_audit (at)",
)
USAGE_COLUMNS = ("at", "person", "channel", "run_id", "model", "input_tokens", "output_tokens", "cached_tokens", "estimated")
AUDIT_COLUMNS = ("at", "person", "channel", "run_id", "kind", "detail")


class UsageEntry(BaseModel):
    """One model call's tokens, as the endpoint reported them (`estimated`: it reported none)."""

    at: str = Field(default_factory=utc_now)
    person: str = ""
    channel: str = ""
    run_id: str | None = None
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False

    def row(self) -> tuple[Any, ...]:
        return tuple(getattr(self, c) for c in USAGE_COLUMNS)


class AuditEntry(BaseModel):
    """One decision an operator may be asked about: who, when, on which run, and what."""

    at: str = Field(default_factory=utc_now)
    person: str = ""
    channel: str = ""
    run_id: str | None = None
    kind: str
    detail: dict[str, Any] = {}

    def row(self) -> tuple[Any, ...]:
        values = self.model_dump()
        values["detail"] = json.dumps(self.detail, ensure_ascii=False, default=str)
        return tuple(values[c] for c in AUDIT_COLUMNS)

    @classmethod
    def of_row(cls, row: tuple[Any, ...]) -> AuditEntry:
        values = dict(zip(AUDIT_COLUMNS, row))
        values["detail"] = json.loads(values["detail"] or "{}")
        return cls.model_validate(values)


class UsageTotal(BaseModel):
    """A person's or a channel's calls and tokens over a period."""

    key: str
    calls: int
    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class OperatorLog(Protocol):
    def add_usage(self, entry: UsageEntry) -> None: ...

    def add_audit(self, entry: AuditEntry) -> None: ...

    def usage_totals(self, by: UsageBy, since: str | None = None) -> list[UsageTotal]: ...

    def tokens_spent(self, by: UsageBy, key: str, since: str) -> int: ...

    def audit_entries(
        self, *, run_id: str | None = None, person: str | None = None, since: str | None = None
    ) -> list[AuditEntry]: ...


def totals_query(by: UsageBy, since: str | None, mark: str) -> tuple[str, list[Any]]:
    """The usage totals' SQL for either backend (`mark` is its parameter placeholder)."""
    column = _BY_COLUMN[by]
    where, params = ("WHERE at >= " + mark, [since]) if since else ("", [])
    sql = (
        f"SELECT {column}, count(*), coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0) "
        f"FROM crew_usage {where} GROUP BY {column} ORDER BY sum(input_tokens) + sum(output_tokens) DESC, 1"
    )
    return sql, params


def spent_query(by: UsageBy, mark: str) -> str:
    column = _BY_COLUMN[by]
    return (
        f"SELECT coalesce(sum(input_tokens + output_tokens), 0) FROM crew_usage "
        f"WHERE {column} = {mark} AND at >= {mark}"
    )


def audit_query(run_id: str | None, person: str | None, since: str | None, mark: str) -> tuple[str, list[Any]]:
    conditions: list[str] = []
    params: list[Any] = []
    for column, value, op in (("run_id", run_id, "="), ("person", person, "="), ("at", since, ">=")):
        if value:
            conditions.append(f"{column} {op} {mark}")
            params.append(value)
    where = f"WHERE {' AND '.join(conditions)} " if conditions else ""
    return f"SELECT {', '.join(AUDIT_COLUMNS)} FROM crew_audit {where}ORDER BY at", params


def _insert(table: str, columns: tuple[str, ...], mark: str) -> str:
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join([mark] * len(columns))})"


USAGE_INSERT = _insert("crew_usage", USAGE_COLUMNS, "{mark}")
AUDIT_INSERT = _insert("crew_audit", AUDIT_COLUMNS, "{mark}")


class SqliteOperatorLog:
    """The embedded store's operator log: one sqlite file beside the run index, shared by the bot and the CLI.

    WAL mode, so `crewagent usage` reads while the bot writes; no fsync per row (a crash may lose the
    last rows, as it may lose the last log lines). Rows are written by a thread of their own: a model
    call books its usage from the event loop, which must not wait on sqlite; a read here waits until
    every row added before it is written.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(path, timeout=10.0, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        for statement in SCHEMA_STATEMENTS:
            self._db.execute(statement)
        self._rows: queue.Queue[tuple[str, tuple[Any, ...]] | None] = queue.Queue()
        self._writer = threading.Thread(target=self._write_rows, name="operator-log writer", daemon=True)
        self._writer.start()

    def close(self) -> None:
        self._rows.put(None)
        self._writer.join(timeout=10.0)
        with self._lock:
            self._db.close()

    def add_usage(self, entry: UsageEntry) -> None:
        self._rows.put((USAGE_INSERT.format(mark="?"), entry.row()))

    def add_audit(self, entry: AuditEntry) -> None:
        self._rows.put((AUDIT_INSERT.format(mark="?"), entry.row()))

    def _write_rows(self) -> None:
        while (row := self._rows.get()) is not None:
            try:
                with self._lock:
                    self._db.execute(*row)
            except (sqlite3.Error, OSError):  # a full disk loses the row, never the call that made it
                log.exception("could not write a row of the operator log")
            finally:
                self._rows.task_done()
        self._rows.task_done()

    def _written(self) -> None:
        """Wait until every row added so far is in the file (reads see what was added before them)."""
        if self._writer.is_alive():
            self._rows.join()

    def usage_totals(self, by: UsageBy, since: str | None = None) -> list[UsageTotal]:
        sql, params = totals_query(by, since, "?")
        self._written()
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [UsageTotal(key=r[0], calls=r[1], input_tokens=r[2], output_tokens=r[3]) for r in rows]

    def tokens_spent(self, by: UsageBy, key: str, since: str) -> int:
        self._written()
        with self._lock:
            (spent,) = self._db.execute(spent_query(by, "?"), (key, since)).fetchone()
        return int(spent)

    def audit_entries(
        self, *, run_id: str | None = None, person: str | None = None, since: str | None = None
    ) -> list[AuditEntry]:
        sql, params = audit_query(run_id, person, since, "?")
        self._written()
        with self._lock:
            rows = self._db.execute(sql, params).fetchall()
        return [AuditEntry.of_row(tuple(r)) for r in rows]
