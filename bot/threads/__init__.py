"""Slack threads as sessions. A thread's work is a pipeline of plain steps: intake (the event, parsed
once) → the thread worker (the inbox, the thread's order) → the pipeline, whose event handler (text,
click, form, upkeep) decides one session call → the session call run (one output sink) → the thread
renderer. Around them: the thread store, the event claims, and the state and notes the steps share."""
