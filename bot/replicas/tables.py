"""The tables replicas coordinate through: thread sessions, Home tab viewers, live replicas, thread
leases, the inbox of thread events (and their dedupe claims), the model-work slots and the outbox of messages not yet in Slack. Created
with the run tables when the pool opens; columns added later are added to an existing database too.

`crew_leases.epoch` grows each time a thread's lease passes to a new holder; a write made for a
thread names the epoch its writer holds and lands only while that is still the thread's epoch
(FENCE_SQL), so a replica that lost a thread cannot change it any more."""

from ..inbox.records import postgres_ddl

REPLICA_SCHEMA = """
CREATE TABLE IF NOT EXISTS crew_threads (
    key text PRIMARY KEY,
    run_id text,
    data jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS crew_threads_by_run ON crew_threads (run_id);
CREATE INDEX IF NOT EXISTS crew_threads_by_owner ON crew_threads ((data->'session'->>'owner'));
-- Handled deliveries of an earlier version (and what `crewagent migrate` copies from an embedded
-- seen.sqlite): kept in place; the inbox's rows are the claims now, and take over at a start the claims
-- it holds for rows still waiting (bot.inbox.records.postgres_ddl).
CREATE TABLE IF NOT EXISTS crew_seen (
    key text PRIMARY KEY,
    at double precision NOT NULL
);
ALTER TABLE crew_seen ADD COLUMN IF NOT EXISTS thread_key text;
ALTER TABLE crew_seen ADD COLUMN IF NOT EXISTS epoch bigint;
CREATE TABLE IF NOT EXISTS crew_home_viewers (
    person text PRIMARY KEY,
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
ALTER TABLE crew_leases ADD COLUMN IF NOT EXISTS epoch bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS crew_outbox (
    seq bigserial PRIMARY KEY,
    id text UNIQUE NOT NULL,
    replica text,
    state text NOT NULL DEFAULT 'pending',
    entry jsonb NOT NULL,
    done_at double precision
);
CREATE INDEX IF NOT EXISTS crew_outbox_pending ON crew_outbox (state, seq);
ALTER TABLE crew_outbox ADD COLUMN IF NOT EXISTS thread_key text;
ALTER TABLE crew_outbox ADD COLUMN IF NOT EXISTS epoch bigint;
CREATE TABLE IF NOT EXISTS crew_model_slots (
    slot integer PRIMARY KEY,
    replica text,
    thread_key text
);
""" + postgres_ddl()  # the inbox: one definition for Postgres and SQLite (bot.inbox.records)

FENCE_SQL = "EXISTS (SELECT 1 FROM crew_leases WHERE thread_key = {key} AND epoch = {epoch})"
"""True while `epoch` is still the thread's lease epoch: put in the statement of every fenced write."""
