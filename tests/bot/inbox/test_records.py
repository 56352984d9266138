"""One inbox table for both stores: the columns SQLite and Postgres hold are the same, and an inbox
Postgres kept from before delivery ids is brought up to date in place, its waiting rows kept."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
import sqlalchemy as sa
from psycopg_pool import ConnectionPool

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.inbox.file_inbox import FileInbox
from crewagent.bot.replicas.tables import REPLICA_SCHEMA
from crewagent.core.store.database import create_schema

pytestmark = pytest.mark.slow  # a real Postgres

KEY = ThreadKey("T1", "C1", "1700000000.000100")
OLD_INBOX = """
CREATE TABLE crew_inbox (seq bigserial PRIMARY KEY, thread_key text NOT NULL, event jsonb NOT NULL);
CREATE INDEX crew_inbox_by_thread ON crew_inbox (thread_key, seq);
"""


def columns(url: str) -> dict[str, tuple[str, bool]]:
    """Each column's type family and whether it may be NULL, as SQLAlchemy's inspector reads them."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        found = sa.inspect(engine).get_columns("crew_inbox")
    finally:
        engine.dispose()
    return {column["name"]: (family(column["type"]), bool(column["nullable"])) for column in found}


def family(kind: sa.types.TypeEngine[object]) -> str:
    for name, types in (("integer", (sa.Integer,)), ("text", (sa.String,)), ("json", (sa.JSON,)), ("float", (sa.Float,))):
        if isinstance(kind, types):
            return name
    return type(kind).__name__  # SQLite reports a JSON column by its declared name


def indexes(url: str) -> set[tuple[str, bool]]:
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        return {(str(index["name"]), bool(index["unique"])) for index in sa.inspect(engine).get_indexes("crew_inbox")}
    finally:
        engine.dispose()


def alchemy_url(database_url: str) -> str:
    return database_url.replace("postgresql://", "postgresql+psycopg://", 1)


async def test_sqlite_and_postgres_hold_the_same_inbox(tmp_path: Path, database_url: str, sync_pool: ConnectionPool) -> None:
    path = tmp_path / "inbox.sqlite"
    inbox = FileInbox(path)
    await inbox.add(ThreadEvent(kind="text", thread=str(KEY), user="U1", text="hi", dedupe=["msg:C1:1.1"]))
    await inbox.close()
    on_sqlite, on_postgres = columns(f"sqlite:///{path}"), columns(alchemy_url(database_url))
    assert list(on_sqlite) == [
        "seq", "thread_key", "delivery", "event", "control", "queued_at", "done_at", "claimed_at", "claim_epoch",
    ]
    assert {name: nullable for name, (_, nullable) in on_sqlite.items()} == {
        name: nullable for name, (_, nullable) in on_postgres.items()
    }
    for name in ("seq", "thread_key", "delivery", "queued_at", "done_at", "claimed_at", "claim_epoch"):
        assert on_sqlite[name][0] == on_postgres[name][0], name
    assert on_postgres["event"][0] == "json" and on_sqlite["event"][0] in ("json", "JSON")
    assert indexes(f"sqlite:///{path}") == indexes(alchemy_url(database_url))


def test_an_inbox_from_before_delivery_ids_is_migrated_in_place_with_its_waiting_rows(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_INBOX)
        conn.execute(
            "INSERT INTO crew_inbox (thread_key, event) VALUES (%s, %s)",
            (str(KEY), psycopg.types.json.Jsonb({"kind": "text", "thread": str(KEY), "user": "U1", "text": "old"})),
        )
        create_schema(conn, REPLICA_SCHEMA)
        create_schema(conn, REPLICA_SCHEMA)  # a second start changes nothing
        row = conn.execute("SELECT delivery, done_at, event->>'text' FROM crew_inbox").fetchone()
    assert row is not None and row[0].startswith("seq:") and row[1] is None and row[2] == "old"
    with psycopg.connect(database_url, autocommit=True) as conn:  # the old row answers to its delivery id
        assert conn.execute("SELECT key FROM crew_inbox_keys").fetchall() == [(row[0],)]
    assert "crew_inbox_by_thread" not in {name for name, _ in indexes(alchemy_url(database_url))}
    assert ("crew_inbox_delivery", True) in indexes(alchemy_url(database_url))


def test_a_waiting_row_keeps_the_claim_an_earlier_version_made_for_it(database_url: str) -> None:
    """An upgrade while a decided event still waits: its claim in crew_seen becomes the row's."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(OLD_INBOX)
        conn.execute(
            "CREATE TABLE crew_seen (key text PRIMARY KEY, at double precision NOT NULL, thread_key text, epoch bigint)"
        )
        for text, key in (("decided", "ev:Ev1"), ("waiting", "ev:Ev2")):
            event = {"kind": "text", "thread": str(KEY), "user": "U1", "text": text, "dedupe": [key]}
            conn.execute("INSERT INTO crew_inbox (thread_key, event) VALUES (%s, %s)", (str(KEY), psycopg.types.json.Jsonb(event)))
        conn.execute("INSERT INTO crew_seen VALUES ('ev:Ev1', 1.0, %s, 3)", (str(KEY),))
        create_schema(conn, REPLICA_SCHEMA)
        found = conn.execute(
            "SELECT event->>'text', claimed_at IS NOT NULL, claim_epoch FROM crew_inbox ORDER BY seq"
        ).fetchall()
        keys = {key for (key,) in conn.execute("SELECT key FROM crew_inbox_keys")}
    assert found == [("decided", True, 3), ("waiting", False, None)]
    assert {"ev:Ev1", "ev:Ev2"} <= keys
