"""The durable outbox: what a person must read is recorded before it is sent, and sent until Slack takes it."""
