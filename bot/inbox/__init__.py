"""The one inbox of incoming thread work: one table on SQLite (embedded, and a replica while its database is away) and on Postgres (replicas), deduplicated by Slack's delivery id at the insert."""
