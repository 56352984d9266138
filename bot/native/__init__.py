"""Slack's AI app surface: streamed replies, status line, suggested prompts, with fallbacks."""
