"""Replicas over Postgres: thread leases, hand-over and the shared model-work cap."""
