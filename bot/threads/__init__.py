"""Slack threads as sessions. A thread's work is a pipeline of plain steps: intake (the event, parsed
once) → lanes (the thread's order) → an event handler (text, click, form, upkeep) that decides one
session call → the call runner (one output sink) → the thread renderer. Around it: the thread store,
dedupe, and the state and notes the steps share."""
