"""Errors: the one exception type a surface catches and shows to its user."""

from __future__ import annotations

from ..base.errors import CrewError

__all__ = ["CrewError"]
