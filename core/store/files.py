"""RuntimeStore: the private directory where runs live, away from the user's project.

Layout under the home:

    packages/                                   extracted .bmad archives (read-only cache)
    runs-index.json                             one small index of every run (atomic, locked)
    projects/<projectId>/runs/<runId>/
        conversation.jsonl                      the run's durable message log (outside @state)
        state/                                  = @state for the model
            workflow.md                         Document-as-State
            logs/execution.jsonl                audit events
            logs/tool-results/                  full copies of oversized tool outputs

`projectId` is the first 16 hex digits of sha256(realpath(projectRoot)).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..base.atomic import AppendLog, atomic_write_text
from ..base.errors import CrewError
from ..base.attribution import current as current_attribution
from .operator_log import OPERATOR_LOG_FILE, OperatorLog, SqliteOperatorLog
from .operator_audit import operator_log_entry
from .runs_model import RunRecord, utc_now

INDEX_FILE = "runs-index.json"
_AUDIT_JSON = json.JSONEncoder(ensure_ascii=False, default=str)  # built once: json.dumps(**options) builds one per call
_ENTRY_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ENTRY_DECODER = json.JSONDecoder()
_INDEX_HEAD = '{"version": 1, "runs": [\n'
_INDEX_TAIL = "\n]}\n"
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
        self._lock = threading.Lock()
        self._cache: dict[str, dict[str, Any]] = {}
        self._texts: dict[str, str] = {}
        self._cache_signature: tuple[int, int, int, int] | None = None
        self._home_str = os.fspath(self.home)
        self._index_file = os.path.join(self.home, INDEX_FILE)
        self._lock_file = os.path.join(self.home, f".{INDEX_FILE}.lock")
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

    # ---- run index ---------------------------------------------------------

    @contextmanager
    def _locked_index(self) -> Iterator[int]:
        """Thread lock for this process, flock for other processes sharing the home; yields the lock
        file's descriptor, which also holds the index's write generation."""
        with self._lock:
            fd = os.open(self._lock_file, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield fd  # closing the descriptor releases the lock
            finally:
                os.close(fd)

    def _signature(self, lock_fd: int) -> tuple[int, int, int, int] | None:
        """(inode, mtime, size) of the index, and the write generation every save bumps (lock held).

        Inode, mtime and size alone can repeat: ext4 reuses a replaced file's inode for the next
        new one, and its mtime may not move between two quick writes. The generation cannot.
        """
        try:
            st = os.stat(self._index_file)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size, _generation(lock_fd))

    def _raw_index(self, lock_fd: int) -> dict[str, dict[str, Any]]:
        """run_id -> stored dict; re-read only when another writer changed the file (lock held)."""
        signature = self._signature(lock_fd)
        if signature is not None and signature == self._cache_signature:
            return self._cache
        entries: list[tuple[dict[str, Any], str]] = []
        if signature is not None:
            try:
                entries = _index_entries(self.index_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CrewError(
                    "RUNS_INDEX_READ_FAILED",
                    f"The run index in the runtime home cannot be read ({type(exc).__name__}). "
                    "Move runs-index.json aside to start a fresh index.",
                ) from None
        kept = [(str(i["run_id"]), i, text) for i, text in entries if isinstance(i, dict) and i.get("run_id")]
        self._cache = {run_id: item for run_id, item, _ in kept}
        self._texts = {run_id: text for run_id, _, text in kept}
        self._cache_signature = signature
        return self._cache

    def read_index(self) -> dict[str, RunRecord]:
        with self._locked_index() as lock_fd:
            raw = dict(self._raw_index(lock_fd))
        return RunRecord.valid_entries(raw)

    def read_record(self, run_id: str) -> RunRecord | None:
        """One run by id, validating only that entry (the index may hold thousands of runs)."""
        with self._locked_index() as lock_fd:
            item = self._raw_index(lock_fd).get(run_id)
        if item is None:
            return None
        try:
            return RunRecord.model_validate(item)
        except ValidationError:
            return None

    def entries_of_sessions(self, session_ids: Collection[str]) -> dict[str, dict[str, Any]]:
        """The index entries (as stored, not validated: see `RunRecord.valid_entries`) of the runs these conversations
        started. A surface listing many runs validates only the few it shows."""
        wanted = frozenset(session_ids)
        with self._locked_index() as lock_fd:
            raw = self._raw_index(lock_fd)
            return {run_id: item for run_id, item in raw.items() if item.get("session_id") in wanted}

    def save_record(self, record: RunRecord) -> None:
        """Insert or replace one record, atomically. Only the changed record is serialised again."""
        with self._locked_index() as lock_fd:
            self._raw_index(lock_fd)
            item = record.model_dump(mode="json")
            texts = {**self._texts, record.run_id: _dumps(item)}
            text = _INDEX_HEAD + ",\n".join(texts.values()) + _INDEX_TAIL
            try:
                _bump_generation(lock_fd)  # before the file changes: a crash in between only costs a re-read
                atomic_write_text(self._index_file, text)
            except OSError as exc:
                raise CrewError(
                    "RUNS_INDEX_WRITE_FAILED",
                    f"Could not write the run index in the runtime home ({exc.strerror or type(exc).__name__}).",
                ) from None
            self._cache = {**self._cache, record.run_id: item}
            self._texts = texts
            self._cache_signature = self._signature(lock_fd)


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


def _dumps(item: dict[str, Any]) -> str:
    return _ENTRY_JSON.encode(item)


def _index_entries(text: str) -> list[tuple[Any, str]]:
    """The index's runs, each with its JSON text (reused by the next save).

    The layout save_record writes (one run per line) is parsed line by line, so the texts come for
    free; that checks exactly what parsing the whole file would. Any other layout is parsed whole,
    and its runs serialised again. Raises ValueError for text that is not the index's JSON.
    """
    if text.startswith(_INDEX_HEAD) and text.endswith(_INDEX_TAIL):
        lines = text[len(_INDEX_HEAD) : -len(_INDEX_TAIL)]
        try:
            return [(_entry(line), line) for line in lines.split(",\n")] if lines else []
        except ValueError:
            pass  # perhaps a hand edit that is still valid JSON as a whole
    raw = json.loads(text)
    items = raw.get("runs", []) if isinstance(raw, dict) else []
    return [(item, _dumps(item) if isinstance(item, dict) else "") for item in items]


def _entry(line: str) -> Any:
    """One JSON value filling the whole line (raw_decode: json.loads costs more than the parse here)."""
    value, end = _ENTRY_DECODER.raw_decode(line)
    if end != len(line):
        raise ValueError("more than one JSON value on the line")
    return value


def _generation(lock_fd: int) -> int:
    return int.from_bytes(os.pread(lock_fd, 8, 0), "little")


def _bump_generation(lock_fd: int) -> None:
    os.pwrite(lock_fd, (_generation(lock_fd) + 1).to_bytes(8, "little"), 0)
