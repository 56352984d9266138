"""The shared Postgres store of a replicated deployment: its URL, its tables, its connections.

Every replica keeps in Postgres what another replica needs to take a thread over: thread sessions,
the run index, each run's files (state document, conversation and audit logs), event dedupe,
leases, queued events and the model-work slots. Tables are created at start-up (idempotent, under
an advisory lock so replicas starting together do not race on the catalog).
"""

from __future__ import annotations

import os

import psycopg
from psycopg import Connection
from psycopg_pool import ConnectionPool

from ..base.errors import CrewError

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
CREATE TABLE IF NOT EXISTS crew_threads (
    key text PRIMARY KEY,
    run_id text,
    data jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS crew_threads_by_run ON crew_threads (run_id);
CREATE INDEX IF NOT EXISTS crew_threads_by_owner ON crew_threads ((data->'session'->>'owner'));
CREATE TABLE IF NOT EXISTS crew_seen (
    key text PRIMARY KEY,
    at double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS crew_replicas (
    id text PRIMARY KEY,
    heartbeat timestamptz NOT NULL DEFAULT now(),
    started timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS crew_leases (
    thread_key text PRIMARY KEY,
    replica text,
    last_holder text,
    acquired timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS crew_inbox (
    seq bigserial PRIMARY KEY,
    thread_key text NOT NULL,
    event jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS crew_inbox_by_thread ON crew_inbox (thread_key, seq);
CREATE TABLE IF NOT EXISTS crew_model_slots (
    slot integer PRIMARY KEY,
    replica text,
    thread_key text
);
"""


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


def create_schema(conn: Connection) -> None:
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        conn.execute(SCHEMA)


def open_pool(url: str, *, max_size: int = 8, timeout: float = 10.0) -> ConnectionPool:
    """A pool of autocommit connections, the schema ensured; raises CrewError when Postgres is unreachable."""
    try:
        with psycopg.connect(check_url(url), autocommit=True, connect_timeout=max(1, int(timeout))) as conn:
            create_schema(conn)
    except psycopg.Error as exc:
        raise _unreachable(exc) from None
    pool = ConnectionPool(
        url,
        min_size=1,
        max_size=max_size,
        kwargs={"autocommit": True, "connect_timeout": max(1, int(timeout))},
        open=False,
        name="crewagent",
    )
    try:
        pool.open(wait=True, timeout=timeout)
    except Exception as exc:
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
