"""`crewagent migrate --to postgresql://…`: copy the embedded store into the database replicas share.

Copies every run (index entry and run folder: state document, conversation and audit logs, tool
results), every Slack thread session and the inbox: events still waiting (a replica handles them)
and handled ones with their Slack ids (a late redelivery is still handled once). Running it again updates what
it copied before; the embedded store is left as it was.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import sys
from contextlib import closing
from pathlib import Path

import sqlalchemy as sa
from psycopg_pool import ConnectionPool
from psycopg.types.json import Jsonb
from sqlalchemy.dialects import postgresql

from crewagent.bot.base.thread import ThreadRecord
from crewagent.bot.inbox.file_inbox import FileInbox
from crewagent.bot.inbox.records import POSTGRES, SQLITE, compiled, inbox, inbox_keys
from crewagent.bot.replicas.tables import REPLICA_SCHEMA
from crewagent.bot.threads.store import open_table
from crewagent.core.api.stores import PostgresRuntimeStore, RuntimeStore
from crewagent.core.api.errors import CrewError

EXIT_USAGE = 2


def migrate(source_home: Path, url: str) -> dict[str, int]:
    source = RuntimeStore(source_home)
    target = PostgresRuntimeStore.open(url, source.home, schema=REPLICA_SCHEMA)
    pool = target.pool
    counts = {"runs": 0, "files": 0, "threads": 0, "deliveries": 0}
    try:
        for record in source.read_index().values():
            target.save_record(record)
            counts["files"] += target.import_run_dir(record, source.run_dir(record))
            counts["runs"] += 1
        slack_dir = source.home / "slack"
        if (slack_dir / "threads.sqlite").exists():
            threads = open_table(slack_dir / "threads.sqlite", "threads")
            try:
                with pool.connection() as conn, conn.transaction():
                    for key, raw in threads.items():
                        record = ThreadRecord.model_validate(raw)
                        conn.execute(
                            "INSERT INTO crew_threads (key, run_id, data) VALUES (%s, %s, %s) ON CONFLICT (key) "
                            "DO UPDATE SET run_id = EXCLUDED.run_id, data = EXCLUDED.data",
                            (key, record.session.run_id, Jsonb(record.model_dump(mode="json"))),
                        )
                        counts["threads"] += 1
            finally:
                threads.close()
        counts["deliveries"] = _copy_inbox(slack_dir, pool)
    finally:
        target.close()
        pool.close()
    return counts


def _copy_inbox(slack_dir: Path, pool: ConnectionPool) -> int:
    """The embedded inbox's rows and their keys, added where their delivery is not in the database yet;
    an earlier version's journal is taken into the file first. Returns how many rows the file holds."""
    path, earlier = slack_dir / "inbox.sqlite", slack_dir / "pending.sqlite"
    if not path.exists() and not earlier.exists():
        return 0
    asyncio.run(_brought_up_to_date(FileInbox(path, earlier=earlier)))
    columns = [column for column in inbox.columns if column.name != "seq"]
    with closing(sqlite3.connect(str(path))) as db:
        rows = db.execute(compiled(sa.select(*columns).order_by(inbox.c.seq), SQLITE).sql).fetchall()
        keys = db.execute(compiled(sa.select(inbox_keys.c.key, inbox_keys.c.delivery), SQLITE).sql).fetchall()
    add_row = compiled(
        postgresql.insert(inbox).values({column.name: sa.bindparam(column.name) for column in columns})
        .on_conflict_do_nothing(index_elements=[inbox.c.delivery]),
        POSTGRES,
    )
    add_key = compiled(
        postgresql.insert(inbox_keys).values(key=sa.bindparam("key"), delivery=sa.bindparam("delivery"))
        .on_conflict_do_nothing(index_elements=[inbox_keys.c.key]),
        POSTGRES,
    )
    documents = {"event", "control"}
    with pool.connection() as conn, conn.transaction():
        for row in rows:
            values = {
                column.name: Jsonb(json.loads(value)) if column.name in documents and value is not None else value
                for column, value in zip(columns, row)
            }
            conn.execute(add_row.sql, add_row.args(values))
        for key, delivery in keys:
            conn.execute(add_key.sql, add_key.args({"key": key, "delivery": delivery}))
    return len(rows)


async def _brought_up_to_date(file_inbox: FileInbox) -> None:
    await file_inbox.waiting()
    await file_inbox.close()


def run(args: argparse.Namespace) -> int:
    url = str(args.to).strip()
    source = RuntimeStore()
    try:
        counts = migrate(source.home, url)
    except CrewError as exc:
        print(exc.message, file=sys.stderr)
        return EXIT_USAGE
    print(
        f"Copied {counts['runs']} run(s) ({counts['files']} file(s)), {counts['threads']} Slack thread(s) and "
        f"{counts['deliveries']} inbox event(s) from {source.home} into the database.\n"
        "Start every replica with CREWAGENT_DATABASE_URL set to that URL (or `database_url:` in crewagent.yml)."
    )
    return 0
