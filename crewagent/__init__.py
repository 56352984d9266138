"""CrewAgent for Slack, installed under one name: `crewagent.core` (the engine), `crewagent.bot` (the Slack
surface) and `crewagent.cli` (the terminal). Their source folders stay at the top of the checkout; setup.py
maps them here, so nothing named plain `core`, `bot` or `cli` lands in a shared environment."""
