"""The shared Postgres store of a replicated deployment: its URL, the run tables, its connections.

Postgres keeps what another replica needs to go on with a run: the run index and each run's files
(state document, conversation and audit logs). The code that coordinates replicas brings its own
tables (thread sessions, event dedupe, leases, queued events, model-work slots) as `schema` to
`open_pool`. Tables are created at start-up (idempotent, under an advisory lock so replicas
starting together do not race on the catalog).
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg import Connection
from psycopg_pool import ConnectionPool

from ..base.errors import CrewError
from .operator_log import SCHEMA_STATEMENTS as OPERATOR_LOG_SCHEMA

DATABASE_ENV = "CREWAGENT_DATABASE_URL"
_SCHEMA_LOCK = 0x63726577  # advisory lock key held while the schema is created

SCHEMA = """
CREATE TABLE IF NOT EXISTS crew_runs (
    run_id text PRIMARY KEY,
    phase text NOT NULL,
    data jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS crew_runs_running ON crew_runs (run_id) WHERE phase = 'running';
CREATE INDEX IF NOT EXISTS crew_runs_by_session ON crew_runs ((data->>'session_id'));
CREATE TABLE IF NOT EXISTS crew_run_files (
    run_id text NOT NULL,
    rel text NOT NULL,
    content bytea NOT NULL,
    PRIMARY KEY (run_id, rel)
);
CREATE TABLE IF NOT EXISTS crew_run_lines (
    seq bigserial PRIMARY KEY,
    run_id text NOT NULL,
    rel text NOT NULL,
    line bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS crew_run_lines_by_run ON crew_run_lines (run_id, rel, seq);
ALTER TABLE crew_run_lines ADD COLUMN IF NOT EXISTS write_id text;
CREATE UNIQUE INDEX IF NOT EXISTS crew_run_lines_once ON crew_run_lines (write_id);
""" + ";\n".join(OPERATOR_LOG_SCHEMA) + ";\n"  # the operator log (core.store.operator_log)


# A connection whose peer stops answering (a silent partition: no reset, packets lost) must fail within
# about 15 s rather than hang for the kernel's two hours: libpq probes an idle connection after 5 s, every
# 2 s, and gives up after 3 missed probes (11 s); `tcp_user_timeout` ends one whose sent bytes stay unacknowledged
# for 10 s. Every connection the product opens to Postgres uses these.
SILENT_PEER_SETTINGS: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,  # milliseconds
}


# The server must let go of a silent client too: one frozen in the middle of a transaction keeps its row
# locks (a thread's lease, a run's rows), and every other replica's writes to them wait for as long as the
# server's own keepalives take (two hours by default). Each session asks the server for the same probes.
SERVER_SIDE_OPTIONS = "-c tcp_keepalives_idle=5 -c tcp_keepalives_interval=2 -c tcp_keepalives_count=3 -c tcp_user_timeout=10000"


def connection_settings(connect_timeout: float, *, options: str = "") -> dict[str, Any]:
    """Keyword arguments for `psycopg.connect` and a pool's `kwargs`: autocommit, a bound on connecting,
    and the settings that notice a silent peer on both sides (`options`: more server settings)."""
    return {"autocommit": True, "connect_timeout": max(1, int(connect_timeout)), **SILENT_PEER_SETTINGS,
            "options": f"{SERVER_SIDE_OPTIONS} {options}".strip()}


def database_url(explicit: str | None = None) -> str | None:
    """`database_url:` from the config, else $CREWAGENT_DATABASE_URL; None means the embedded store."""
    url = (explicit or os.environ.get(DATABASE_ENV, "")).strip()
    return url or None


def check_url(url: str) -> str:
    if not url.startswith(("postgresql://", "postgres://")):
        raise CrewError(
            "DATABASE_URL_INVALID",
            "The database URL must start with postgresql:// (for example postgresql://user:pass@host:5432/crewagent).",
        )
    return url


def create_schema(conn: Connection, extra: str = "") -> None:
    """The run tables, then `extra` (another part's own tables), in one locked transaction."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        conn.execute(SCHEMA)
        if extra:
            conn.execute(extra)


def open_pool(url: str, *, max_size: int = 8, timeout: float = 10.0, schema: str = "") -> ConnectionPool:
    """A pool of autocommit connections, the run tables and `schema` ensured; raises CrewError when
    Postgres is unreachable."""
    try:
        with psycopg.connect(check_url(url), **connection_settings(timeout)) as conn:
            create_schema(conn, schema)
    except psycopg.Error as exc:
        raise _unreachable(exc) from None
    pool = ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        kwargs=connection_settings(timeout),
        open=False,
        name="crewagent",
        # After the server restarted, the connections the pool kept are dead: each is checked as it is
        # handed out, and a dead one replaced, so the first query after an outage does not fail.
        check=ConnectionPool.check_connection,
    )
    try:
        pool.open(wait=True, timeout=timeout)
    except psycopg.Error as exc:  # PoolTimeout included
        pool.close()
        raise _unreachable(exc) from None
    return pool


def _unreachable(exc: Exception) -> CrewError:
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return CrewError(
        "DATABASE_UNREACHABLE",
        f"Cannot use the Postgres database ({detail}). "
        "Check the database URL, that the server runs, and that the user may create tables.",
    )
