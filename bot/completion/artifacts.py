"""Reading a run's artifact for upload into its thread, re-checked inside @project at click time.

The path comes from a button, so it is treated as untrusted: it must still be one of the run's
recorded artifacts, resolve inside the project through the sandbox rules (no `..`, no symlink
escape, nothing hidden from agents: the file may have changed since the button was drawn) and fit
the upload cap.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from crewagent.core.api.errors import CrewError
from crewagent.core.api.tools import Mounts, OffLimits, resolve

UPLOAD_LIMIT = 5 * 1024 * 1024


class ArtifactUnavailable(CrewError):
    def __init__(self, message: str) -> None:
        super().__init__("ARTIFACT_UNAVAILABLE", message)


async def read_artifact(
    project: Path, package_root: Path, path: str, recorded: list[str], off_limits: OffLimits
) -> bytes:
    """The file's bytes, or ArtifactUnavailable saying why not (in words fit for the thread)."""
    if path not in recorded:
        raise ArtifactUnavailable(f"`{path}` is not an artifact of this run any more.")
    try:
        mounts = Mounts(project=project, pkg=package_root, off_limits=off_limits)
        real = resolve(mounts, f"@project/{path}", write=False).real
        data = await asyncio.to_thread(_read_capped, real)
    except CrewError as exc:
        raise ArtifactUnavailable(f"I can't share `{path}`: {exc.message}") from None
    except OSError:
        raise ArtifactUnavailable(f"`{path}` can't be read any more (was it moved or deleted?).") from None
    if data is None:
        raise ArtifactUnavailable(
            f"`{path}` is larger than {UPLOAD_LIMIT // (1024 * 1024)} MB; open it in the project instead."
        )
    return data


def _read_capped(path: Path) -> bytes | None:
    if not path.is_file():
        raise OSError("not a file")
    if path.stat().st_size > UPLOAD_LIMIT:
        return None
    return path.read_bytes()
