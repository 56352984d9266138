"""A completed run's file button: the artifact is checked against the thread and the run, then uploaded
into the thread."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from pathlib import Path

from crewagent.core.api.errors import CrewError
from crewagent.core.api.runs import RunManager, RunSnapshot
from crewagent.core.api.tools import OffLimits

from ..base.actions import ButtonValue
from ..base.thread import ThreadRecord
from ..outgoing import Upload
from ..slack_port import SlackPort, upload_failure, upload_refusal
from .artifacts import UPLOAD_LIMIT, ArtifactUnavailable, read_artifact

OUT_OF_DATE = "That file list is out of date; use the newest completion message."
COMMAND_LOGS = "@state/logs/commands/"
LOG_NAME = re.compile(r"[0-9A-Za-z]+-[0-9a-f]{8}\.log")

Snapshot = Callable[[ThreadRecord, str], Awaitable[RunSnapshot | None]]


class Uploads:
    def __init__(self, io: SlackPort, runs: RunManager, off_limits: OffLimits) -> None:
        self.io = io
        self.runs = runs
        self.off_limits = off_limits  # the engine's: what agents cannot read, the thread cannot either

    async def upload(
        self, record: ThreadRecord, value: ButtonValue, snapshot: Snapshot, *, project: Path, package_root: Path
    ) -> str | None:
        """Upload the file `value` names into the thread; None when done, else what to tell the user."""
        key = record.key
        if not value.r:
            return OUT_OF_DATE
        if not await self.started_here(record, value.r):  # a forged value naming another thread's run
            return "That file belongs to a run of another conversation."
        if value.f and value.f.startswith(COMMAND_LOGS):
            return await self._command_log(record, value.r, value.f)
        current = await snapshot(record, value.r)
        recorded = current.artifacts if current else []
        path = value.f
        if path is None and value.i is not None and 0 <= value.i < len(recorded):
            path = recorded[value.i]
        if not path:
            return OUT_OF_DATE
        try:
            run = await asyncio.to_thread(self.runs.get, value.r)
        except CrewError:
            run = None
        workspace = Path(run.workspace) if run is not None else project  # a run's own worktree, if any
        try:
            data = await read_artifact(workspace, package_root, path, recorded, self.off_limits)
        except ArtifactUnavailable as exc:
            return exc.message
        failure = upload_failure(await self.io.send(Upload(key.channel, key.thread_ts, Path(path).name, data, path)))
        return upload_refusal(path, failure) if failure is not None else None

    async def _command_log(self, record: ThreadRecord, run_id: str, path: str) -> str | None:
        """A command's whole log ("Show output"), from the run's own logs folder, by its plain file name."""
        name = path.removeprefix(COMMAND_LOGS)
        if not LOG_NAME.fullmatch(name):
            return OUT_OF_DATE

        def read() -> bytes | None:
            run = self.runs.get(run_id)
            with open(self.runs.store.state_dir(run) / "logs" / "commands" / name, "rb") as handle:
                return handle.read(UPLOAD_LIMIT)

        try:
            data = await asyncio.to_thread(read)
        except (CrewError, OSError):
            return "That command's log is no longer kept."
        key = record.key
        upload = Upload(key.channel, key.thread_ts, name, data or b"(empty)", "Command output")
        failure = upload_failure(await self.io.send(upload))
        return upload_refusal(name, failure) if failure is not None else None

    async def started_here(self, record: ThreadRecord, run_id: str) -> bool:
        """True when the run belongs to this thread's conversation (checked before reading anything of it)."""
        session = record.session
        if run_id in (session.run_id, session.last_run_id, record.status_run_id):
            return True

        def owner() -> str | None:
            try:
                return self.runs.get(run_id).session_id
            except CrewError:
                return None

        return await asyncio.to_thread(owner) == session.id
