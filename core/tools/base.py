"""The contract between the engine and the tools: what a call may see, and what it reports back."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal

from ..base.events import EngineEvent
from ..package.models import Graph
from .off_limits import OffLimits
from .shell.command_config import CommandsConfig

ToolMode = Literal["run", "agent", "chat", "script"]


@dataclass(frozen=True)
class GitView:
    """A run's own repository, as the bot's records name it: what the sandbox may show of git."""

    git_dir: Path  # holds only the run's branch and commits
    borrowed_objects: Path | None = None  # the shared object store it borrows the project's history from


@dataclass(frozen=True)
class Mounts:
    """Real roots behind the alias paths the model uses. `state` is None outside a run.

    `off_limits` is what neither the file tools nor a command may see below them (the same object
    reaches the sandbox through `shell_run`).
    """

    project: Path
    pkg: Path
    state: Path | None = None
    git: GitView | None = None  # a git project's run whose @project is its worktree's top
    off_limits: OffLimits = OffLimits()


@dataclass(frozen=True)
class EffectivePolicy:
    """Agent settings merged with system settings; agents can only tighten."""

    fs_enabled: bool = True
    max_read_bytes: int = 524_288
    max_write_bytes: int = 2_097_152
    mcp_requested: bool = False  # MCP is on for the system and the agent
    mcp_servers: tuple[str, ...] = ()  # the configured servers this agent may use
    max_list_entries: int = 200
    max_search_matches: int = 50
    max_search_seconds: float = 20.0  # a search still running then is stopped (patterns come from the model)
    shell: CommandsConfig | None = None  # `commands:`, when this agent may run commands (shell_run)


@dataclass
class Confirmation:
    """One-shot permission for one state change after completion. Never persisted."""

    granted: bool = False

    def consume(self) -> bool:
        was = self.granted
        self.granted = False
        return was


@dataclass(frozen=True)
class ApprovalRequest:
    """A call that may run only after the run owner says yes; the pump holds it until then.

    The tool did nothing yet. On Approve the pump calls the same tool again with
    `ToolContext.approved` set, and that call's real result becomes the tool message; on Deny the
    tool message is an error with `denied_code`.
    """

    kind: Literal["mcp", "command"]
    title: str  # a short heading, e.g. "Run a command?"
    message: str  # markdown for the owner: what will run, where, with which limits
    denied_code: str  # MCP_CALL_DENIED or COMMAND_DENIED
    allow_for_run: str | None = None  # a command prefix the owner may allow for the rest of the run


@dataclass
class ToolContext:
    mounts: Mounts
    policy: EffectivePolicy
    mode: ToolMode
    agent_id: str
    run_id: str | None = None
    graph: Graph | None = None  # the run's selected workflow graph; required for state writes
    confirmation: Confirmation = field(default_factory=Confirmation)
    audit: Callable[[dict[str, Any]], None] | None = None  # appends one event to execution.jsonl
    approved: str | None = None  # who approved this very call (set only when an approved call is made)
    allowed_for_run: frozenset[str] = frozenset()  # command prefixes the owner allowed for this run
    progress: Callable[[EngineEvent], Awaitable[None]] | None = None  # a long call's progress, to the surface
    stop_requested: Callable[[], bool] | None = None  # true once the owner stopped the run (a command ends then)


@dataclass
class ToolOutcome:
    """What one tool call produced. `result` is sent to the model as JSON; the rest drives the engine."""

    result: dict[str, Any]
    state_changed: bool = False
    artifacts_created: list[str] = field(default_factory=list)  # project-relative paths
    files_written: list[str] = field(default_factory=list)  # alias paths written under @project
    widget: dict[str, Any] | None = None  # a validated ui_ask_user payload: the pump stops here
    state: dict[str, Any] | None = None  # the run state's frontmatter as this call wrote it (saves a re-read)
    result_json: str | None = None  # `result` as JSON, when ToolHost already serialised it (saves a re-dump)
    approval: ApprovalRequest | None = None  # set: nothing ran; the call waits for the owner (result unused)

    @property
    def ok(self) -> bool:
        return bool(self.result.get("ok"))


def ok(**data: Any) -> dict[str, Any]:
    return {"ok": True, **data}


def fail(code: str, message: str, **details: Any) -> dict[str, Any]:
    err: dict[str, Any] = {"code": code, "message": message}
    if details:
        err["details"] = details
    return {"ok": False, "error": err}
