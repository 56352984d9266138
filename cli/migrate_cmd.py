"""`crewagent migrate --to postgresql://…`: copy the embedded store into the database replicas share.

Copies every run (index entry and run folder: state document, conversation and audit logs, tool
results), every Slack thread session and the handled-delivery set. Running it again updates what
it copied before; the embedded store is left as it was.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from psycopg.types.json import Jsonb

from crewagent.bot.base.thread import ThreadRecord
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
        if (slack_dir / "seen.sqlite").exists():
            seen = open_table(slack_dir / "seen.sqlite", "seen")
            try:
                with pool.connection() as conn, conn.transaction():
                    for key, at in seen.items():
                        conn.execute(
                            "INSERT INTO crew_seen (key, at) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                            "SET at = GREATEST(crew_seen.at, EXCLUDED.at)",
                            (key, float(at)),
                        )
                        counts["deliveries"] += 1
            finally:
                seen.close()
    finally:
        target.close()
        pool.close()
    return counts


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
        f"{counts['deliveries']} handled deliveries from {source.home} into the database.\n"
        "Start every replica with CREWAGENT_DATABASE_URL set to that URL (or `database_url:` in crewagent.yml)."
    )
    return 0
