"""Progress reported by the engine; a surface (terminal, Slack) renders these, `core` prints nothing."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field


class RunPhase(str, Enum):
    RUNNING = "running"
    WAITING_USER = "waiting-user"
    COMPLETED = "completed"
    FAILED = "failed"


class _Event(BaseModel):
    run_id: str
    parent_run_id: str | None = None  # set on a sub-workflow's events: the run that called it


class SubworkflowStarted(_Event):
    """The run entered a subworkflow node: its child run starts (or, after a stop or crash, goes on)."""

    kind: Literal["subworkflow_started"] = "subworkflow_started"
    node_id: str  # the caller's node
    caller_workflow_id: str
    child_run_id: str
    workflow_id: str
    workflow_name: str
    resumed: bool = False


class SubworkflowReturned(_Event):
    """The child completed; the caller recorded its outputs and moved past the node."""

    kind: Literal["subworkflow_returned"] = "subworkflow_returned"
    node_id: str
    child_run_id: str
    workflow_id: str
    workflow_name: str
    variables: dict[str, Any] = {}  # copied into the caller's variables
    artifacts: list[str] = []  # appended to the caller's artifacts


class NodeStarted(_Event):
    kind: Literal["node_started"] = "node_started"
    node_id: str
    title: str
    agent_id: str
    workflow_id: str | None = None


class ToolExecuted(_Event):
    kind: Literal["tool_executed"] = "tool_executed"
    tool: str  # wire name, e.g. fs_write
    ok: bool
    summary: str  # one short line, alias paths only
    error_code: str | None = None


class CommandProgress(_Event):
    """A shell_run command: when it starts, now and then while it runs, and once when it ended.

    Text is as the model sees it: aliases (@project), never a host path.
    """

    kind: Literal["command_progress"] = "command_progress"
    call_id: str
    command: str  # shortened to one line
    cwd: str = "@project"
    running: bool = True
    elapsed_ms: int = 0  # 0 only on the first event (the command starts)
    last_line: str = ""  # the latest output line, for a status line
    exit_code: int | None = None  # once ended; None when it was killed
    killed: str | None = None  # "timeout", "stopped", or the bound it passed: "memory", "disk"
    tail: str = ""  # once ended: the output's last lines
    log: str | None = None  # the whole log, @state/logs/commands/…


class ArtifactWritten(_Event):
    kind: Literal["artifact_written"] = "artifact_written"
    path: str  # project-relative, e.g. artifacts/create-story/target.md


class StateUpdated(_Event):
    kind: Literal["state_updated"] = "state_updated"
    current_node_id: str
    steps_completed: list[str]
    steps_total: int  # every step of the graph, from start to end of the run
    steps_not_taken: int = 0  # once complete: the steps on branches the run did not take
    artifacts: list[str]
    complete: bool = False  # workflowStatus "complete", or else the end node in stepsCompleted, as of this state


class PhaseChanged(_Event):
    kind: Literal["phase_changed"] = "phase_changed"
    phase: RunPhase
    paused: bool = False
    reason: str | None = None  # human-readable, for failed/paused/loop-detected
    error_code: str | None = None


class AssistantText(_Event):
    kind: Literal["assistant_text"] = "assistant_text"
    text: str
    agent_id: str | None = None


class AssistantTextDelta(_Event):
    """A piece of assistant text as the model streams it; the whole text follows as AssistantText.

    `restart` (with empty text): the connection was lost mid-answer and the call is being made again;
    the pieces of this turn shown so far are void and the new answer's pieces follow.
    """

    kind: Literal["assistant_text_delta"] = "assistant_text_delta"
    text: str
    turn: int  # the model call it belongs to: one call's pieces make one message
    agent_id: str | None = None
    restart: bool = False


class WidgetRequested(_Event):
    kind: Literal["widget_requested"] = "widget_requested"
    widget: dict[str, Any]  # validated ui_ask_user payload (widgetId, type, message, ...)


class LLMRetrying(_Event):
    kind: Literal["llm_retrying"] = "llm_retrying"
    attempt: int  # the attempt about to be made is attempt + 1
    reason: str  # what went wrong with the last one, in user terms (no host names)
    attempts: int = 0  # how many attempts are allowed in all (0: unknown)


def progress_text(done: int, total: int, not_taken: int = 0, *, unit: str = " steps") -> str:
    """`2/5 steps` while a run works; once it is complete on a branching graph, `4 of 5 steps, 1 not taken`.

    The total is the graph's step count from start to end, so it never shrinks as the run goes."""
    if not_taken > 0:
        return f"{done} of {total}{unit}, {not_taken} not taken"
    return f"{done}/{total}{unit}"


def retry_note(event: LLMRetrying) -> str:
    """One line for a surface's status while the model call is retried."""
    of = f" of {event.attempts}" if event.attempts else ""
    return f"The model did not answer ({event.reason}); trying again (attempt {event.attempt + 1}{of})…"


EngineEvent = Annotated[
    Union[
        NodeStarted,
        ToolExecuted,
        CommandProgress,
        ArtifactWritten,
        StateUpdated,
        PhaseChanged,
        AssistantText,
        AssistantTextDelta,
        WidgetRequested,
        LLMRetrying,
        SubworkflowStarted,
        SubworkflowReturned,
    ],
    Field(discriminator="kind"),
]
