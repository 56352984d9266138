"""The tables replicas coordinate through: thread sessions, event dedupe, live replicas, thread
leases, queued events, the model-work slots and the outbox of messages not yet in Slack. Created
with the run tables when the pool opens."""

REPLICA_SCHEMA = """
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
CREATE TABLE IF NOT EXISTS crew_outbox (
    seq bigserial PRIMARY KEY,
    id text UNIQUE NOT NULL,
    replica text,
    state text NOT NULL DEFAULT 'pending',
    entry jsonb NOT NULL,
    done_at double precision
);
CREATE INDEX IF NOT EXISTS crew_outbox_pending ON crew_outbox (state, seq);
CREATE TABLE IF NOT EXISTS crew_model_slots (
    slot integer PRIMARY KEY,
    replica text,
    thread_key text
);
"""
