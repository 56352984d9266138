"""The bottom of bot/: thread keys and records, the thread event, what buttons and forms carry."""
