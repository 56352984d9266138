"""Slack threads as sessions: their store, per-thread order, dedupe, and the work done for them."""
