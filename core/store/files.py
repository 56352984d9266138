"""RuntimeStore: the private directory where runs live, away from the user's project.

Layout under the home:

    packages/                                   extracted .bmad archives (read-only cache)
    runs-index.json, runs-index.journal         one small index of every run (core.store.run_index)
    projects/<projectId>/runs/<runId>/
        conversation.jsonl                      the run's durable message log (outside @state)
        state/                                  = @state for the model
            workflow.md                         Document-as-State
            logs/execution.jsonl                audit events
            logs/tool-results/                  full copies of oversized tool outputs

`projectId` is the first 16 hex digits of sha256(realpath(projectRoot)).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from ..base.atomic import AppendLog
from ..base.errors import CrewError
from ..base.attribution import current as current_attribution
from .operator_log import OPERATOR_LOG_FILE, OperatorLog, SqliteOperatorLog
from .operator_audit import operator_log_entry
from .run_index import INDEX_FILE, RunIndex
from .runs_model import RunRecord, utc_now

log = logging.getLogger(__name__)

_AUDIT_JSON = json.JSONEncoder(ensure_ascii=False, default=str)  # built once: json.dumps(**options) builds one per call
CONVERSATION_FILE = "conversation.jsonl"


def default_home() -> Path:
    """$CREWAGENT_HOME, else $XDG_DATA_HOME/crewagent, else ~/.local/share/crewagent."""
    explicit = os.environ.get("CREWAGENT_HOME", "").strip()
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME", "").strip()
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "crewagent"


def project_id_for(project_root: str | Path) -> str:
    real = os.path.realpath(project_root)
    return hashlib.sha256(real.encode("utf-8")).hexdigest()[:16]


class RuntimeStore:
    """Paths and the run index. Everything here is small file work, safe to call from the loop."""

    def __init__(self, home: Path | None = None) -> None:
        self.home = Path(os.path.realpath(home if home is not None else default_home()))
        self.home.mkdir(parents=True, exist_ok=True)
        self.packages_dir.mkdir(exist_ok=True)
        self._home_str = os.fspath(self.home)
        self.index = RunIndex(self._home_str)
        self._operator_log: OperatorLog | None = None
        # Told of every audit event after it is logged (e.g. the bot's metrics); each must not raise.
        self.audit_listeners: list[AuditListener] = []

    @property
    def operator_log(self) -> OperatorLog:
        """Usage and audit rows across runs (core.store.operator_log), opened on first use."""
        if self._operator_log is None:
            self._operator_log = self._open_operator_log()
        return self._operator_log

    def _open_operator_log(self) -> OperatorLog:
        return SqliteOperatorLog(self.home / OPERATOR_LOG_FILE)

    # ---- paths -------------------------------------------------------------

    @property
    def packages_dir(self) -> Path:
        return self.home / "packages"

    @property
    def index_path(self) -> Path:
        return self.home / INDEX_FILE

    def _run_path(self, record: RunRecord, *parts: str) -> Path:
        # One join and one Path: chained `/` on Paths costs ~5 µs a step, and a turn asks for these often.
        return Path(os.path.join(self._home_str, "projects", record.project_id, "runs", record.run_id, *parts))

    def run_dir(self, record: RunRecord) -> Path:
        return self._run_path(record)

    def state_dir(self, record: RunRecord) -> Path:
        return self._run_path(record, "state")

    def execution_log(self, record: RunRecord) -> Path:
        return self._run_path(record, "state", "logs", "execution.jsonl")

    def tool_results_dir(self, record: RunRecord) -> Path:
        return self._run_path(record, "state", "logs", "tool-results")

    def conversation_log(self, record: RunRecord) -> Path:
        """Kept beside @state, not inside it, so the model cannot rewrite its own history."""
        return self._run_path(record, CONVERSATION_FILE)

    # ---- checks ------------------------------------------------------------

    def check_project(self, project_root: str | Path) -> Path:
        """The project must exist, and must not contain the store (runs would become artifacts)."""
        root = Path(os.path.realpath(project_root))
        if not root.is_dir():
            raise CrewError(
                "PROJECT_ROOT_INVALID",
                f"The project folder '{Path(project_root).name or project_root}' does not exist or is not a folder. "
                "Pass an existing checkout with --project.",
            )
        if self.home == root or root in self.home.parents:
            raise CrewError(
                "STORE_INSIDE_PROJECT",
                "The runtime home (CREWAGENT_HOME) is inside the project folder, where the model could read or "
                "write run state. Point CREWAGENT_HOME somewhere outside the project.",
            )
        return root

    # ---- audit -------------------------------------------------------------

    def audit(self, record: RunRecord, kind: str, **fields: Any) -> None:
        """Append one event to the run's execution.jsonl."""
        self.audit_sink(record)({"kind": kind, **fields})

    def audit_sink(self, record: RunRecord) -> AuditSink:
        """A callable for ToolContext.audit that stamps and appends events (see AuditSink)."""
        return AuditSink(self.execution_log(record), record.run_id, self._audited)

    def _audited(self, run_id: str, event: dict[str, Any]) -> None:
        """An event just logged: the ones an operator asks about go to the operator log too, then the listeners hear it."""
        entry = operator_log_entry(event, run_id, current_attribution())
        if entry is not None:
            self.operator_log.add_audit(entry)
        for listener in self.audit_listeners:
            listener(run_id, event)

    # ---- run index (core.store.run_index) -------------------------------------------------

    def read_index(self) -> dict[str, RunRecord]:
        return self.index.records()

    def read_record(self, run_id: str) -> RunRecord | None:
        """One run by id, validating only that entry (the index may hold thousands of runs)."""
        return self.index.record(run_id)

    def entries_of_sessions(self, session_ids: Collection[str]) -> dict[str, dict[str, Any]]:
        """The index entries (as stored, not validated: see `RunRecord.valid_entries`) of the runs these conversations
        started. A surface listing many runs validates only the few it shows."""
        return self.index.entries_of_sessions(session_ids)

    def save_record(self, record: RunRecord) -> None:
        """Insert or replace one record, atomically; the cost does not grow with the runs in the home."""
        self.index.save(record)

    def close(self) -> None:
        """A clean stop: the run index's journal is folded into runs-index.json (one atomic rename), so a
        release that reads only that file, run next or beside this one, sees every run. Blocking file
        work: a bot calls it off its event loop. The store stays usable: a later save appends again.
        A fold that fails changes nothing and is only logged (it runs in `finally` blocks, after the
        error a person must see): the journal stays, and a later fold takes it."""
        try:
            self.index.fold()
        except CrewError as exc:
            log.warning("the run index was not folded at the stop", extra={"code": exc.code})


AuditListener = Callable[[str, dict[str, Any]], None]  # (run id, event)


class AuditSink:
    """Stamps events and appends them to one run's execution.jsonl; `log` can be held open.

    One O_APPEND write per line, handed to the OS before returning: a killed process loses nothing
    already logged. Like the conversation log it is not fsynced (power-loss durability is out of scope).
    """

    def __init__(self, path: Path, run_id: str, then: AuditListener | None = None) -> None:
        self.log = AppendLog(path)
        self.run_id = run_id
        self.then = then  # hears each event once it is logged

    def __call__(self, event: dict[str, Any]) -> None:
        line = _AUDIT_JSON.encode({"ts": utc_now(), "runId": self.run_id, **event}) + "\n"
        self.log.write(line.encode("utf-8"))
        if self.then is not None:
            self.then(self.run_id, event)
