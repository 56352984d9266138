"""Paths the user typed, checked before any work starts and named in errors exactly as typed."""

from __future__ import annotations

from pathlib import Path

from crewagent.core.api.errors import CrewError

NO_SUCH = "no such file or folder"


def existing_path(typed: str | Path, *, option: str = "") -> Path:
    """`typed` as a Path when something is there; else a USAGE error naming it as typed."""
    path = Path(typed)
    if not path.exists():
        raise CrewError("USAGE", f"{_label(typed, option)}: {NO_SUCH}")
    return path


def existing_folder(typed: str | Path, *, option: str = "") -> Path:
    """`typed` as a Path when it is a folder; else a USAGE error naming it as typed."""
    path = existing_path(typed, option=option)
    if not path.is_dir():
        raise CrewError("USAGE", f"{_label(typed, option)}: not a folder")
    return path


def _label(typed: str | Path, option: str) -> str:
    return f"{option} {typed}" if option else str(typed)
