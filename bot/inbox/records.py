"""The inbox's one table and its statements, written once with SQLAlchemy Core and compiled once for
each store: SQLite (the embedded bot, a replica's away-inbox) and Postgres (replicas). Each store
runs the compiled text on its own driver (sqlite3 on a worker thread, the psycopg async pool), so an
ack pays for no more than the driver call.

A row is one unit of incoming thread work (a message, a mention of it, a click, a form, a stop) under
its delivery id, Slack's own id for that unit: inserting a delivery already there does nothing, so a
redelivery, or a forward repeated after a crash, queues nothing twice. A row's work is done when
`done_at` is set; the row then stays for the redelivery window (bot.base.event.REDELIVERY_WINDOW)
so that a late redelivery still finds it, and is pruned after that. A waiting row is never pruned.

The row is also the event's dedupe claim (bot.threads.event_claim): `claimed_at` is set when the event is
decided, under the lease epoch of the replica deciding it (`claim_epoch`); a claim without an epoch
is final (no later holder of the thread handles the event again), one of an older epoch on the same
thread may be taken again by a new holder after a takeover. A message reaches the bot under several
keys (the message's and the mention's event ids, its `msg:` key): each key of a row is kept in
`crew_inbox_keys`, so a claim finds the row by any of them. A row whose claim is not final is not
pruned either: the work it guards is not settled.
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
    sa.Column("claimed_at", sa.Double()),  # decided (the event's claim); NULL while it only waits
    sa.Column("claim_epoch", sa.BigInteger()),  # the lease epoch it was decided under; NULL: final
    sa.Index("crew_inbox_delivery", "delivery", unique=True),
    sa.Index(
        "crew_inbox_waiting", "thread_key", "seq",
        postgresql_where=sa.text("done_at IS NULL"), sqlite_where=sa.text("done_at IS NULL"),
    ),
    sa.Index("crew_inbox_done", "done_at"),
    sqlite_autoincrement=True,
)

inbox_keys = sa.Table(
    "crew_inbox_keys",
    metadata,
    sa.Column("key", sa.Text(), primary_key=True),  # one of Slack's ids for the row's delivery
    sa.Column("delivery", sa.Text(), nullable=False),
    sa.Index("crew_inbox_keys_delivery", "delivery"),
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
    """The row's values, and its keys (`row_keys`); `document` turns an event into what the store's driver
    takes for a JSON column."""
    delivery = delivery_of(event)
    return {
        "thread_key": event.thread,
        "delivery": delivery,
        "event": document(event),
        "control": document(control) if control is not None else None,
        "queued_at": time.time(),
        "row_keys": keys_of(event, delivery),
    }


def keys_of(event: ThreadEvent, delivery: str) -> list[str]:
    """Every key the row answers to: the event's dedupe keys and its delivery id."""
    return list(dict.fromkeys([*event.dedupe, delivery]))


def claimed_row(event: ThreadEvent, document: Callable[[ThreadEvent], Any], epoch: int | None) -> dict[str, Any]:
    """A row for work decided without passing through the inbox (a pause or stop of a pumping run, taken
    at once): done when it is claimed, so no lane takes it, and kept for the redelivery window."""
    row = new_row(event, None, document)
    row.update(done_at=row["queued_at"], claimed_at=row["queued_at"], claim_epoch=epoch)
    return row


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

def add_statement(insert: Insert, columns: tuple[str, ...] | None = None) -> Any:
    """Queue a row unless its delivery is there already; returns the new seq, or no row for a duplicate."""
    return (
        insert(inbox)
        .values({name: sa.bindparam(name, type_=inbox.c[name].type) for name in columns or new_row_columns()})
        .on_conflict_do_nothing(index_elements=[inbox.c.delivery])
        .returning(inbox.c.seq)
    )


def new_row_columns() -> tuple[str, ...]:
    return ("thread_key", "delivery", "event", "control", "queued_at")


CLAIMED_ROW_COLUMNS = (*new_row_columns(), "done_at", "claimed_at", "claim_epoch")


def add_key_statement(insert: Insert) -> Any:
    """One more key for a delivery (a redelivery may bring one the row did not have yet)."""
    return (
        insert(inbox_keys)
        .values(key=sa.bindparam("row_key", type_=sa.Text()), delivery=sa.bindparam("delivery", type_=sa.Text()))
        .on_conflict_do_nothing(index_elements=[inbox_keys.c.key])
    )


class ClaimStatements(NamedTuple):
    """The claim statements for one store; `claim_keys` is bound as the store's driver takes a list of
    keys (a Postgres array, a JSON text for SQLite)."""

    claim: Any  # decide the rows: unclaimed ones, or (a takeover) ones of an older epoch on the thread
    found: Any  # is there a row for the keys at all
    claimed: Any  # is a row for the keys claimed
    settle: Any  # the rows count as handled for good, whatever their state (their claims are final)


def claim_statements(keys_match: Any) -> ClaimStatements:
    """`keys_match`: the condition on crew_inbox_keys.key that matches the bound `claim_keys`."""
    rows = inbox.c.delivery.in_(sa.select(inbox_keys.c.delivery).where(keys_match))
    free = sa.or_(
        inbox.c.claimed_at.is_(None),
        sa.and_(
            inbox.c.claim_epoch < sa.bindparam("held_epoch", type_=sa.BigInteger()),
            inbox.c.thread_key == sa.bindparam("held_thread", type_=sa.Text()),
        ),
    )
    claimed_at = sa.bindparam("claim_time", type_=sa.Double())
    return ClaimStatements(
        claim=sa.update(inbox).where(rows, free)
        .values(claimed_at=claimed_at, claim_epoch=sa.bindparam("claim_epoch", type_=sa.BigInteger()))
        .returning(inbox.c.seq),
        found=sa.select(inbox.c.seq).where(rows).limit(1),
        claimed=sa.select(inbox.c.seq).where(rows, inbox.c.claimed_at.is_not(None)).limit(1),
        settle=sa.update(inbox).where(rows).values(claimed_at=claimed_at, claim_epoch=sa.null()),
    )


def postgres_keys_match() -> Any:
    return inbox_keys.c.key == sa.func.any(sa.bindparam("claim_keys", type_=postgresql.ARRAY(sa.Text())))


def sqlite_keys_match() -> Any:
    listed = sa.select(sa.column("value")).select_from(sa.func.json_each(sa.bindparam("claim_keys", type_=sa.Text())))
    return inbox_keys.c.key.in_(listed.scalar_subquery())


WAITING = (
    sa.select(inbox.c.seq, inbox.c.event, inbox.c.control, inbox.c.queued_at)
    .where(inbox.c.done_at.is_(None)).order_by(inbox.c.seq)
)
MARK_DONE = (
    sa.update(inbox)
    .where(inbox.c.seq == sa.bindparam("done_seq"), inbox.c.done_at.is_(None))
    .values(done_at=sa.bindparam("done_time"))
)
# NULL (waiting) never matches; nor does a claim not yet final (the work it guards is not settled).
PRUNE = sa.delete(inbox).where(inbox.c.done_at < sa.bindparam("done_before"), inbox.c.claim_epoch.is_(None))
PRUNE_KEYS = sa.delete(inbox_keys).where(
    ~sa.exists(sa.select(inbox.c.seq).where(inbox.c.delivery == inbox_keys.c.delivery))
)
ALL_WAITING = (  # how many wait, and since when the oldest (what an operator watches)
    sa.select(sa.func.count(), sa.func.min(inbox.c.queued_at)).select_from(inbox).where(inbox.c.done_at.is_(None))
)
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


def created(dialect: sa.engine.Dialect, table: sa.Table = inbox) -> list[str]:
    """The table and its indexes, each created unless it exists."""
    return [str(sa.schema.CreateTable(table, if_not_exists=True).compile(dialect=dialect)).strip()] + [
        str(sa.schema.CreateIndex(index, if_not_exists=True).compile(dialect=dialect)).strip()
        for index in sorted(table.indexes, key=lambda index: str(index.name))
    ]


def sqlite_ddl() -> str:
    """Both tables for SQLite; a file from before the claims gets their columns."""
    return ";\n".join([*created(SQLITE), *created(SQLITE, inbox_keys)]) + ";"


SQLITE_CLAIM_COLUMNS = {"claimed_at": "FLOAT", "claim_epoch": "BIGINT"}  # added to a file that lacks them


def postgres_ddl() -> str:
    """The table for Postgres, created or brought up to date in place: an inbox from before the delivery
    id and the done time gets both, and its old index goes; waiting rows get their keys and the claims
    an earlier version kept for them in `crew_seen` (created before this runs)."""
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
    keys_table = created(POSTGRES, inbox_keys)
    # Rows from before the keys table answer to their event's keys and their delivery id.
    backfill = (
        "INSERT INTO crew_inbox_keys (key, delivery) SELECT k, delivery FROM crew_inbox, "
        "jsonb_array_elements_text(coalesce(event->'dedupe', '[]'::jsonb) || to_jsonb(delivery)) AS k "
        "WHERE NOT EXISTS (SELECT 1 FROM crew_inbox_keys d WHERE d.delivery = crew_inbox.delivery) "
        "ON CONFLICT DO NOTHING"
    )
    # Waiting rows an earlier version decided (its claims in crew_seen) keep their claims.
    claims = (
        "UPDATE crew_inbox i SET claimed_at = s.at, claim_epoch = s.epoch FROM crew_seen s "
        "WHERE i.done_at IS NULL AND i.claimed_at IS NULL AND jsonb_exists(i.event->'dedupe', s.key)"
    )
    return ";\n".join([table, *columns, *migrate, *indexes, *keys_table, backfill, claims]) + ";\n"


def sqlite_insert(table: sa.Table) -> Any:
    return sqlite.insert(table)


def postgres_insert(table: sa.Table) -> Any:
    return postgresql.insert(table)
