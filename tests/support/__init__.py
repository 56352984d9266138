"""Helpers shared by test modules."""
