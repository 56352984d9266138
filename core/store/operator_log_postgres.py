"""The operator log of a replicated deployment: the same two tables as the embedded one, in the shared Postgres.

Rows are written through the run store's writer thread (`queue`), in order with the run writes, so
a model call never waits on the network for its usage row; reads query the database at once (a row
still queued is missing from a read for a moment, which a daily budget does not notice).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ..base.errors import CrewError

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
        rows = self._rows(sql, params)
        return [UsageTotal(key=r[0], calls=r[1], input_tokens=r[2], output_tokens=r[3]) for r in rows]

    def tokens_spent(self, by: UsageBy, key: str, since: str) -> int:
        rows = self._rows(spent_query(by, "%s"), [key, since])
        return int(rows[0][0]) if rows else 0

    def audit_entries(
        self, *, run_id: str | None = None, person: str | None = None, since: str | None = None
    ) -> list[AuditEntry]:
        sql, params = audit_query(run_id, person, since, "%s")
        return [AuditEntry.of_row(tuple(r)) for r in self._rows(sql, params)]

    def _rows(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
        """The query's rows; an unreachable database is a CrewError (its callers decide what that means)."""
        try:
            with self.pool.connection() as conn:
                return conn.execute(sql, params).fetchall()  # type: ignore[arg-type]
        except psycopg.Error as exc:
            raise CrewError("DATABASE_UNREACHABLE", f"The operator log cannot be read ({type(exc).__name__}).") from None

    @classmethod
    def connect(cls, url: str) -> PostgresOperatorLog:
        """A reader's own small pool on the database (the tables are ensured); `close()` lets it go.
        Raises CrewError for a bad URL or an unreachable database."""
        return cls(open_pool(url, max_size=1))

    def close(self) -> None:
        self.pool.close()
