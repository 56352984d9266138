"""Run records (the run index) and the snapshot a surface shows as "run status"."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from ..base.events import RunPhase, progress_text


_last_stamp: tuple[int, str] = (-1, "")  # (ms since the epoch, its text): one tuple, so threads see a pair
_last_second: tuple[int, str] = (-1, "")  # (s since the epoch, `2026-01-02T03:04:05`)


def utc_now() -> str:
    """`2026-01-02T03:04:05.678Z`. A turn stamps a dozen log lines, mostly within one second: the text
    of the second is made once, and only the milliseconds are formatted again."""
    global _last_stamp, _last_second
    ms = time.time_ns() // 1_000_000
    stamp = _last_stamp
    if stamp[0] != ms:
        seconds, milliseconds = divmod(ms, 1000)
        second = _last_second
        if second[0] != seconds:
            text = datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
            second = _last_second = (seconds, text)
        stamp = _last_stamp = (ms, f"{second[1]}.{milliseconds:03d}Z")
    return stamp[1]


class RunError(BaseModel):
    code: str
    message: str


class RunUsage(BaseModel):
    """Model usage summed over a run's calls, as the endpoint reported it (estimated where it did not)."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_prompt_tokens: int = 0  # only from endpoints that report prompt caching
    estimated_calls: int = 0  # calls whose endpoint reported no usage: their tokens are our estimate

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, reported: dict[str, int] | None, estimated_prompt_tokens: int) -> None:
        self.llm_calls += 1
        if reported is None:
            self.estimated_calls += 1
            self.prompt_tokens += estimated_prompt_tokens
            return
        self.prompt_tokens += reported.get("prompt_tokens", 0)
        self.completion_tokens += reported.get("completion_tokens", 0)
        self.cached_prompt_tokens += reported.get("cached_tokens", 0)

    def add_since(self, other: RunUsage, before: RunUsage) -> None:
        """Add what `other` spent since it stood at `before` (a sub-workflow's calls, to its caller)."""
        for name in ("llm_calls", "prompt_tokens", "completion_tokens", "cached_prompt_tokens", "estimated_calls"):
            setattr(self, name, getattr(self, name) + getattr(other, name) - getattr(before, name))

    def line(self) -> str:
        """`12 model calls · 48,210 tokens`, the same words on every surface."""
        calls = f"{self.llm_calls} model call{'s' if self.llm_calls != 1 else ''}"
        approx = "~" if self.estimated_calls else ""
        text = f"{calls} · {approx}{self.total_tokens:,} tokens"
        if self.cached_prompt_tokens:
            text += f" ({self.cached_prompt_tokens:,} cached)"
        return text


class RunWorktree(BaseModel):
    """The git worktree a run works in (server paths: never show them to a user)."""

    path: str  # what @project is: the worktree, or the project folder inside it
    root: str  # the worktree's top folder
    branch: str  # crewagent/<workflow>-<short run id>
    base_branch: str | None = None
    base_commit: str
    # The run's own repository (branch, commits) and the shared object store it borrows the project's
    # history from. None in records written before runs had their own: those are linked worktrees.
    git_dir: str | None = None
    borrowed_objects: str | None = None


class RunDelivery(BaseModel):
    """The run's branch as last pushed to the team's remote."""

    commit: str
    pushed_at: str = Field(default_factory=utc_now)
    pull_request_url: str | None = None


class ModelSpan(BaseModel):
    """Consecutive model calls of a run that went to one model: `turns` calls from call number `first`."""

    model: str
    first: int = Field(ge=1)
    turns: int = Field(default=1, ge=1)

    @property
    def last(self) -> int:
        return self.first + self.turns - 1


class RunRecord(BaseModel):
    """One line of the run index. Paths here are server-side; never show `project_root` to a user."""

    run_id: str
    project_id: str
    project_root: str
    package_id: str
    package_root: str
    workflow_id: str
    active_agent_id: str
    phase: RunPhase = RunPhase.WAITING_USER
    paused: bool = False
    created_at: str = Field(default_factory=utc_now)
    updated_at: str = Field(default_factory=utc_now)
    last_error: RunError | None = None
    extra: dict[str, Any] = {}
    usage: RunUsage = Field(default_factory=RunUsage)
    token_budget: int | None = None  # this run's own token budget; None = the engine's setting
    worktree: RunWorktree | None = None  # None: the run works in project_root itself (a plain folder)
    delivery: RunDelivery | None = None
    # Sub-workflows (core.run.subflow): a child run names its caller; a caller names the child it waits on.
    parent_run_id: str | None = None
    parent_node_id: str | None = None  # the caller's subworkflow node
    child_run_id: str | None = None  # set while a subworkflow node of this run has a child
    child_run_ids: list[str] = []  # every child this run has called, oldest first
    session_id: str | None = None  # the conversation that started the run (None: the CLI, or older records)
    model: str | None = None  # the model its calls use, as its conversation chose (`*model`); None: the default
    models: list[ModelSpan] = []  # which model each call used, oldest first, runs of one model merged

    def note_model(self, model: str) -> None:
        """One more model call went to `model`."""
        last = self.models[-1] if self.models else None
        if last is not None and last.model == model:
            last.turns += 1
        else:
            self.models.append(ModelSpan(model=model, first=(last.last + 1) if last else 1))

    @property
    def workspace(self) -> str:
        """The folder @project is for this run."""
        return self.worktree.path if self.worktree else self.project_root

    @classmethod
    def valid_entries(cls, items: dict[str, Any]) -> dict[str, RunRecord]:
        """Index entries as records; one bad entry must not hide every other run."""
        records: dict[str, RunRecord] = {}
        for run_id, item in items.items():
            try:
                records[run_id] = cls.model_validate(item)
            except ValidationError:
                continue
        return records


class OfferedStep(BaseModel):
    """A workflow offered once the run completes (the package's next steps), in user terms."""

    workflow_id: str
    label: str
    agent_name: str
    back: bool = False  # a step back in the cycle (the review asked for changes)


class RunSnapshot(BaseModel):
    """Everything a status line needs, in user terms (no server paths)."""

    run_id: str
    workflow_id: str
    workflow_name: str
    phase: RunPhase
    paused: bool = False
    current_node_id: str | None = None  # None once completed
    current_node_title: str | None = None
    agent_id: str  # the current node's agent (the run's own agent when the node names none)
    agent_name: str
    run_agent_id: str | None = None  # the agent the run was started with
    run_agent_name: str | None = None
    steps_done: int
    steps_total: int  # every step of the workflow's graph; never shrinks as the run goes
    steps_not_taken: int = 0  # once complete: steps on branches the run did not take
    artifacts: list[str] = []  # project-relative
    error: RunError | None = None
    usage: RunUsage = Field(default_factory=RunUsage)
    branch: str | None = None  # the run's git branch, when its project is a repository
    pushed: bool = False  # the branch has been pushed (see pull_request_url)
    pull_request_url: str | None = None
    steps_completed: list[str] = []  # node ids, in the order they were completed
    child: RunSnapshot | None = None  # the sub-workflow this run waits on, shown nested ("parent › child")
    next_steps: list[OfferedStep] = []  # what may follow this run once it completes (a top-level run only)
    cycle: list[str] = []  # the workflow names of the runs before this one in its cycle, oldest first

    def progress(self, unit: str = " steps") -> str:
        """`2/5 steps`, or `4 of 5 steps, 1 not taken` for a finished run that skipped a branch."""
        return progress_text(self.steps_done, self.steps_total, self.steps_not_taken, unit=unit)

    def chain(self) -> list[RunSnapshot]:
        """This run, then each nested sub-workflow down to the one that is working."""
        out: list[RunSnapshot] = [self]
        while out[-1].child is not None:
            out.append(out[-1].child)  # type: ignore[arg-type]
        return out

