"""`exec` menu items that are plain markdown (not a workflow.md): read the script for a one-shot conversation.

The script reaches the model as an explicit context message under its alias path; it has no
resumable state.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..base.errors import CrewError
from ..tools.mounts import SandboxViolation, resolve
from ..tools.base import Mounts
from .data import data_alias

SCRIPT_MAX_CHARS = 32_000


def _failed(reason: str, alias: str | None, code: str = "EXEC_LOAD_FAILED") -> CrewError:
    where = f" ({alias})" if alias else ""
    return CrewError(code, f"The script of this menu item{where} could not be loaded: {reason}.")


async def script_message(md_path: str, mounts: Mounts, *, max_read_bytes: int) -> str:
    """The markdown script as a context message; package-relative unless templated."""
    try:
        alias = data_alias(md_path)
        target = resolve(mounts, alias, write=False)
    except SandboxViolation:
        raise _failed("the path points outside the project and the package", None, "PERMISSION_DENIED") from None
    except ValueError as exc:
        raise _failed(str(exc), None) from None
    try:
        text = await asyncio.to_thread(_read, target.real, min(max_read_bytes, SCRIPT_MAX_CHARS * 4))
    except FileNotFoundError:
        raise _failed("the file does not exist", target.alias) from None
    except OSError as exc:
        raise _failed(f"it could not be read ({exc.strerror or 'I/O error'})", target.alias) from None
    clipped = text[:SCRIPT_MAX_CHARS]
    more = "" if len(clipped) == len(text) else f"\n(script truncated; read the rest with fs_read({target.alias}))"
    return (
        f"EXEC_SCRIPT (from menuItem.exec: {target.alias})\n"
        "Follow this script now, as the agent, for the user's request below. Only read files; do not write.\n"
        f"---\n{clipped}{more}"
    )


def _read(path: Path, limit: int) -> str:
    with open(path, "rb") as fh:
        return fh.read(limit).decode("utf-8", errors="replace")
