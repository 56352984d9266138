"""RuntimeStore: the private directory where runs live, away from the user's project (D§2.1).

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .atomic import append_line, atomic_write_text
from .errors import CrewError
from .runs_model import RunRecord, utc_now

INDEX_FILE = "runs-index.json"
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
        self._lock = threading.Lock()
        self._cache: dict[str, dict[str, Any]] = {}
        self._texts: dict[str, str] = {}
        self._cache_signature: tuple[int, int, int] | None = None
        self._home_str = os.fspath(self.home)
        self._index_file = os.path.join(self.home, INDEX_FILE)
        self._lock_file = os.path.join(self.home, f".{INDEX_FILE}.lock")

    # ---- paths -------------------------------------------------------------

    @property
    def packages_dir(self) -> Path:
        return self.home / "packages"

    @property
    def index_path(self) -> Path:
        return self.home / INDEX_FILE

    def project_dir(self, project_id: str) -> Path:
        return self.home / "projects" / project_id

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
        """Append one event to the run's execution.jsonl (D§8.1)."""
        self.audit_sink(record)({"kind": kind, **fields})

    def audit_sink(self, record: RunRecord) -> Callable[[dict[str, Any]], None]:
        """A callable for ToolContext.audit that stamps and appends events.

        One O_APPEND write per line, handed to the OS before returning: a killed process loses nothing
        already logged. Like the conversation log it is not fsynced (power-loss durability is out of scope).
        """
        path = os.fspath(self.execution_log(record))
        run_id = record.run_id

        def write(event: dict[str, Any]) -> None:
            line = _AUDIT_JSON.encode({"ts": utc_now(), "runId": run_id, **event}) + "\n"
            append_line(path, line.encode("utf-8"))

        return write

    # ---- run index ---------------------------------------------------------

    @contextmanager
    def _locked_index(self) -> Iterator[None]:
        """Thread lock for this process, flock for other processes sharing the home."""
        with self._lock:
            fd = os.open(self._lock_file, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield  # closing the descriptor releases the lock
            finally:
                os.close(fd)

    def _signature(self) -> tuple[int, int, int] | None:
        """Every save renames a new file into place, so the inode changes with each writer."""
        try:
            st = os.stat(self._index_file)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _raw_index(self) -> dict[str, dict[str, Any]]:
        """run_id -> stored dict; re-read only when another writer changed the file (lock held)."""
        signature = self._signature()
        if signature is not None and signature == self._cache_signature:
            return self._cache
        if signature is None:
            raw: dict[str, Any] = {}
        else:
            try:
                raw = json.loads(self.index_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CrewError(
                    "RUNS_INDEX_READ_FAILED",
                    f"The run index in the runtime home cannot be read ({type(exc).__name__}). "
                    "Move runs-index.json aside to start a fresh index.",
                ) from None
        items = raw.get("runs", []) if isinstance(raw, dict) else []
        self._cache = {str(i.get("run_id")): i for i in items if isinstance(i, dict) and i.get("run_id")}
        self._texts = {run_id: _dumps(item) for run_id, item in self._cache.items()}
        self._cache_signature = signature
        return self._cache

    def read_index(self) -> dict[str, RunRecord]:
        with self._locked_index():
            raw = dict(self._raw_index())
        records: dict[str, RunRecord] = {}
        for run_id, item in raw.items():
            try:
                records[run_id] = RunRecord.model_validate(item)
            except ValidationError:
                continue  # one bad entry must not hide every other run
        return records

    def read_record(self, run_id: str) -> RunRecord | None:
        """One run by id, validating only that entry (the index may hold thousands of runs)."""
        with self._locked_index():
            item = self._raw_index().get(run_id)
        if item is None:
            return None
        try:
            return RunRecord.model_validate(item)
        except ValidationError:
            return None

    def save_record(self, record: RunRecord) -> None:
        """Insert or replace one record, atomically. Only the changed record is serialised again."""
        with self._locked_index():
            self._raw_index()
            item = record.model_dump(mode="json")
            texts = {**self._texts, record.run_id: _dumps(item)}
            text = '{"version": 1, "runs": [\n' + ",\n".join(texts.values()) + "\n]}\n"
            try:
                atomic_write_text(self._index_file, text)
            except OSError as exc:
                raise CrewError(
                    "RUNS_INDEX_WRITE_FAILED",
                    f"Could not write the run index in the runtime home ({exc.strerror or type(exc).__name__}).",
                ) from None
            self._cache = {**self._cache, record.run_id: item}
            self._texts = texts
            self._cache_signature = self._signature()


def _dumps(item: dict[str, Any]) -> str:
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))
