"""The operator log of a replicated deployment: the same two tables as the embedded one, in the shared Postgres.

Rows are written through the run store's writer thread (`queue`), in order with the run writes, so
a model call never waits on the network for its usage row; reads query the database at once (a row
still queued is missing from a read for a moment, which a daily budget does not notice).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg_pool import ConnectionPool

from .database import open_pool
from .operator_log import (
    AUDIT_INSERT,
    USAGE_INSERT,
    AuditEntry,
    UsageBy,
    UsageEntry,
    UsageTotal,
    audit_query,
    spent_query,
    totals_query,
)

Queue = Callable[[str, tuple[Any, ...]], None]  # (statement, parameters) for the writer thread


class PostgresOperatorLog:
    def __init__(self, pool: ConnectionPool, queue: Queue | None = None) -> None:
        """`queue` None: rows are written at once (a command-line reader that writes nothing uses it so)."""
        self.pool = pool
        self._queue = queue

    def _write(self, statement: str, row: tuple[Any, ...]) -> None:
        if self._queue is not None:
            self._queue(statement, row)
            return
        with self.pool.connection() as conn:
            conn.execute(statement, row)

    def add_usage(self, entry: UsageEntry) -> None:
        self._write(USAGE_INSERT.format(mark="%s"), entry.row())

    def add_audit(self, entry: AuditEntry) -> None:
        self._write(AUDIT_INSERT.format(mark="%s"), entry.row())

    def usage_totals(self, by: UsageBy, since: str | None = None) -> list[UsageTotal]:
        sql, params = totals_query(by, since, "%s")
        with self.pool.connection() as conn:
            rows = conn.execute(sql, params).fetchall()  # type: ignore[arg-type]
        return [UsageTotal(key=r[0], calls=r[1], input_tokens=r[2], output_tokens=r[3]) for r in rows]

    def tokens_spent(self, by: UsageBy, key: str, since: str) -> int:
        with self.pool.connection() as conn:
            row = conn.execute(spent_query(by, "%s"), (key, since)).fetchone()  # type: ignore[arg-type]
        return int(row[0]) if row else 0

    def audit_entries(
        self, *, run_id: str | None = None, person: str | None = None, since: str | None = None
    ) -> list[AuditEntry]:
        sql, params = audit_query(run_id, person, since, "%s")
        with self.pool.connection() as conn:
            rows = conn.execute(sql, params).fetchall()  # type: ignore[arg-type]
        return [AuditEntry.of_row(tuple(r)) for r in rows]

    @classmethod
    def connect(cls, url: str) -> PostgresOperatorLog:
        """A reader's own small pool on the database (the tables are ensured); `close()` lets it go.
        Raises CrewError for a bad URL or an unreachable database."""
        return cls(open_pool(url, max_size=1))

    def close(self) -> None:
        self.pool.close()
