"""Prompt composition: layered system messages, run anchors and the user-input shells."""
