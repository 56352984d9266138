"""RunStore: what the engine, the run manager and the sessions need from wherever runs persist.

`RuntimeStore` (files under CREWAGENT_HOME) and `PostgresRuntimeStore` (the database replicas
share) both implement it; a surface picks one at start-up and hands it to `RunManager` and
`Engine`, which never ask which one they got.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any, Protocol

from .files import AuditListener, AuditSink
from .operator_log import OperatorLog
from .runs_model import RunRecord


class RunStore(Protocol):
    home: Path
    audit_listeners: list[AuditListener]

    @property
    def operator_log(self) -> OperatorLog: ...

    @property
    def packages_dir(self) -> Path: ...

    def run_dir(self, record: RunRecord) -> Path: ...

    def state_dir(self, record: RunRecord) -> Path: ...

    def execution_log(self, record: RunRecord) -> Path: ...

    def tool_results_dir(self, record: RunRecord) -> Path: ...

    def conversation_log(self, record: RunRecord) -> Path: ...

    def check_project(self, project_root: str | Path) -> Path: ...

    def audit(self, record: RunRecord, kind: str, **fields: Any) -> None: ...

    def audit_sink(self, record: RunRecord) -> AuditSink: ...

    def read_index(self) -> dict[str, RunRecord]: ...

    def read_record(self, run_id: str) -> RunRecord | None: ...

    def entries_of_sessions(self, session_ids: Collection[str]) -> dict[str, dict[str, Any]]: ...

    def save_record(self, record: RunRecord) -> None: ...
