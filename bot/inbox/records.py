"""The inbox's one table and its statements, written once with SQLAlchemy Core and compiled once for
each store: SQLite (the embedded bot, a replica's away-inbox) and Postgres (replicas). Each store
runs the compiled text on its own driver (sqlite3 on a worker thread, the psycopg async pool), so an
ack pays for no more than the driver call.

A row is one unit of incoming thread work (a message, a mention of it, a click, a form, a stop) under
its delivery id, Slack's own id for that unit: inserting a delivery already there does nothing, so a
redelivery, or a forward repeated after a crash, queues nothing twice. A row's work is done when
`done_at` is set; the row then stays for the redelivery window (bot.base.event.REDELIVERY_WINDOW)
so that a late redelivery still finds it, and is pruned after that. A waiting row is never pruned.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB

from ..base.event import ThreadEvent

metadata = sa.MetaData()

JSON_DOCUMENT = sa.JSON().with_variant(JSONB(), "postgresql")  # jsonb on Postgres, text on SQLite

inbox = sa.Table(
    "crew_inbox",
    metadata,
    # SQLite autoincrements only a column declared exactly INTEGER: a pruned seq is never handed out again.
    sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), primary_key=True, autoincrement=True),
    sa.Column("thread_key", sa.Text(), nullable=False),
    sa.Column("delivery", sa.Text(), nullable=False),
    sa.Column("event", JSON_DOCUMENT, nullable=False),
    sa.Column("control", JSON_DOCUMENT),  # what every replica is told at once (pause/stop of a pumping run)
    sa.Column("queued_at", sa.Double(), nullable=False),
    sa.Column("done_at", sa.Double()),
    sa.Index("crew_inbox_delivery", "delivery", unique=True),
    sa.Index(
        "crew_inbox_waiting", "thread_key", "seq",
        postgresql_where=sa.text("done_at IS NULL"), sqlite_where=sa.text("done_at IS NULL"),
    ),
    sa.Index("crew_inbox_done", "done_at"),
    sqlite_autoincrement=True,
)

POSTGRES = postgresql.psycopg.dialect()  # type: ignore[attr-defined]
SQLITE = sqlite.pysqlite.dialect(paramstyle="named")  # type: ignore[attr-defined]
Insert = Callable[[sa.Table], Any]  # sqlite.insert or postgresql.insert: each has on_conflict_do_nothing


class Queued(NamedTuple):
    seq: int
    event: ThreadEvent
    control: ThreadEvent | None


def delivery_of(event: ThreadEvent) -> str:
    """Slack's id for the unit of work. A message and the app_mention for it come with two event ids but
    one message: its `msg:` key. A click, a form or a stop carries one key; an event without any is unique."""
    message = next((key for key in event.dedupe if key.startswith("msg:")), None)
    return message or (event.dedupe[0] if event.dedupe else f"local:{uuid.uuid4().hex}")


def new_row(event: ThreadEvent, control: ThreadEvent | None, document: Callable[[ThreadEvent], Any]) -> dict[str, Any]:
    """The row's values; `document` turns an event into what the store's driver takes for a JSON column."""
    return {
        "thread_key": event.thread,
        "delivery": delivery_of(event),
        "event": document(event),
        "control": document(control) if control is not None else None,
        "queued_at": time.time(),
    }


def read_row(seq: int, event: Any, control: Any) -> Queued | None:
    """The row as events; None when it cannot be read (written by another version)."""
    try:
        return Queued(
            int(seq), ThreadEvent.model_validate(_document(event)),
            ThreadEvent.model_validate(_document(control)) if control is not None else None,
        )
    except ValueError:
        return None


def _document(value: Any) -> Any:
    return json.loads(value) if isinstance(value, (str, bytes)) else value


# ---- statements (bound parameters by name; the same on both stores) ----------------------------

def add_statement(insert: Insert) -> Any:
    """Queue a row unless its delivery is there already; returns the new seq, or no row for a duplicate."""
    return (
        insert(inbox)
        .values({name: sa.bindparam(name, type_=inbox.c[name].type) for name in new_row_columns()})
        .on_conflict_do_nothing(index_elements=[inbox.c.delivery])
        .returning(inbox.c.seq)
    )


def new_row_columns() -> tuple[str, ...]:
    return ("thread_key", "delivery", "event", "control", "queued_at")


WAITING = (
    sa.select(inbox.c.seq, inbox.c.event, inbox.c.control).where(inbox.c.done_at.is_(None)).order_by(inbox.c.seq)
)
MARK_DONE = (
    sa.update(inbox)
    .where(inbox.c.seq == sa.bindparam("done_seq"), inbox.c.done_at.is_(None))
    .values(done_at=sa.bindparam("done_time"))
)
PRUNE = sa.delete(inbox).where(inbox.c.done_at < sa.bindparam("done_before"))  # NULL (waiting) never matches
THREAD_WAITING = (
    sa.select(inbox.c.seq).where(inbox.c.thread_key == sa.bindparam("waiting_thread"), inbox.c.done_at.is_(None))
    .limit(1)
)


class Compiled(NamedTuple):
    """A statement compiled once for one store's driver (named parameters), with the values it holds
    itself (a LIMIT, a channel name)."""

    sql: str
    fixed: dict[str, Any]

    def args(self, values: dict[str, Any]) -> dict[str, Any]:
        return {**self.fixed, **values}


def compiled(statement: Any, dialect: sa.engine.Dialect) -> Compiled:
    done = statement.compile(dialect=dialect)
    return Compiled(str(done), {name: value for name, value in done.params.items() if value is not None})


def created(dialect: sa.engine.Dialect) -> list[str]:
    """The table and its indexes, each created unless it exists."""
    return [str(sa.schema.CreateTable(inbox, if_not_exists=True).compile(dialect=dialect)).strip()] + [
        str(sa.schema.CreateIndex(index, if_not_exists=True).compile(dialect=dialect)).strip()
        for index in sorted(inbox.indexes, key=lambda index: str(index.name))
    ]


def postgres_ddl() -> str:
    """The table for Postgres, created or brought up to date in place: an inbox from before the delivery
    id and the done time gets both, and its old index goes."""
    table, *indexes = created(POSTGRES)
    columns = [
        f"ALTER TABLE crew_inbox ADD COLUMN IF NOT EXISTS {column.name} "
        f"{column.type.compile(dialect=POSTGRES)}"
        for column in inbox.columns
        if not column.primary_key
    ]
    migrate = [
        # Rows queued before delivery ids: unique by their seq (their dedupe claims still guard them).
        "UPDATE crew_inbox SET delivery = 'seq:' || seq WHERE delivery IS NULL",
        "UPDATE crew_inbox SET queued_at = extract(epoch FROM now()) WHERE queued_at IS NULL",
        "ALTER TABLE crew_inbox ALTER COLUMN delivery SET NOT NULL",
        "ALTER TABLE crew_inbox ALTER COLUMN queued_at SET NOT NULL",
        "DROP INDEX IF EXISTS crew_inbox_by_thread",
    ]
    return ";\n".join([table, *columns, *migrate, *indexes]) + ";\n"


def sqlite_insert(table: sa.Table) -> Any:
    return sqlite.insert(table)


def postgres_insert(table: sa.Table) -> Any:
    return postgresql.insert(table)
