"""One pump: a user input in, as many LLM/tool turns as the workflow needs.

A pump stops at the first assistant reply without tool calls (WaitingUser, or Completed), at a
`ui_ask_user` widget or a tool call waiting for the owner's approval, on pause/stop between turns,
on a runaway loop, or on an LLM failure; each ending is the PumpResult the loop returns. Every
message is in the conversation log before the next step and every state write is validated and
atomic, so a killed process resumes from `@state/workflow.md` + the log.

The prompt is composed incrementally (core.prompts.run_prompt), tool calls are executed and
recorded by core.run.tool_round, held for approval by core.run.tool_approvals, sub-workflows are
run by core.run.subflow, and progress is reported by core.run.reporter; this module is the loop
itself: turns, the state as the model changes it, and how a pump ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..document import state as run_state
from . import subflow
from ..base.atomic import remove_stale_temps
from ..base.errors import CrewError
from ..base.events import AssistantText, RunPhase, WidgetRequested
from .engine_model import EventSink, Intent, PumpResult
from ..store.files import AuditSink
from ..store.history import POST_COMPLETION_SCOPE, History
from ..model.client import LLMReply, ToolCall
from ..package.models import Package, Workflow
from ..tools.policy import effective_policy
from ..prompts.composer import effective_agent_id
from ..prompts.run_prompt import RunPrompt
from ..base.answers import ApprovalDecision, UserInput, confirms_state_change
from ..base.wrappers import wrap_user_input
from .reporter import RunReporter
from .pump_deps import PumpControl, PumpDeps
from .runaway import RunawayGuard
from ..store.runs_model import RunError, RunRecord
from .tool_approvals import HeldCall, ToolApprovals, answer_to, legacy_answer_note
from .model_turn import BUDGET_CODE, ModelAsk, ModelTurns, TurnEnded
from .tool_round import ToolRecorder
from ..tools.base import Confirmation, GitView, Mounts, ToolContext, ToolOutcome



@dataclass
class Round:
    """One reply's tool calls, as run: the widget to stop at (a question or an approval), the context
    for the next calls, and whether the run was complete before them."""

    widget: dict[str, Any] | None
    ctx: ToolContext
    was_complete: bool


@dataclass(frozen=True)
class OpenedRun:
    """What `pump_run` opened for one pump: the run's workflow, its logs, its history and its state."""

    workflow: Workflow
    audit: AuditSink
    reporter: RunReporter
    history: History
    state_dir: Path
    fm: dict[str, Any]


async def pump_run(
    deps: PumpDeps,
    record: RunRecord,
    package: Package,
    intent: Intent,
    user_input: UserInput | None,
    on_event: EventSink | None,
    control: PumpControl,
) -> PumpResult:
    """Open the run's logs and state, pump it, and say how it ended; the logs are released either way."""
    audit = deps.store.audit_sink(record)
    audit.log.hold()  # this pump alone writes the run's logs until it ends: keep them open
    reporter = RunReporter(record, deps.runs, audit, on_event)
    history: History | None = None
    try:
        workflow = package.workflow(record.workflow_id)
        if workflow is None:
            message = (f"Package '{package.id}' no longer has workflow '{record.workflow_id}'; load the package "
                       "version this run was started with.")
            return await _failed_before_start(reporter, record, "WORKFLOW_NOT_FOUND", message)
        state_dir = deps.store.state_dir(record)
        removed = remove_stale_temps(state_dir)  # left by a process killed mid-write; this pump alone writes here
        if removed:
            audit({"kind": "state.temp_removed", "files": removed})
        try:
            history = deps.histories.open(deps.store.conversation_log(record))
            if history.log is not None:
                history.log.hold()
            fm = run_state.read_state(state_dir)
        except CrewError as exc:
            message = f"The run state cannot be read: {exc.message}"
            return await _failed_before_start(reporter, record, exc.code, message)
        opened = OpenedRun(workflow, audit, reporter, history, state_dir, fm)
        pump = Pump(deps, record, package, intent, user_input, on_event, control, opened)
        result = await pump.run()
        deps.histories.keep(history)  # the next pump of this run need not re-read the log
        return result
    finally:
        audit.log.release()
        if history is not None and history.log is not None:
            history.log.release()


async def _failed_before_start(reporter: RunReporter, record: RunRecord, code: str, message: str) -> PumpResult:
    error = RunError(code=code, message=message)
    await reporter.phase(RunPhase.FAILED, reason=message, error=error)
    return PumpResult(run_id=record.run_id, phase=RunPhase.FAILED, error=error)


class Pump:
    """One run's loop; every ending is a returned PumpResult."""

    def __init__(
        self,
        deps: PumpDeps,
        record: RunRecord,
        package: Package,
        intent: Intent,
        user_input: UserInput | None,
        on_event: EventSink | None,
        control: PumpControl,
        opened: OpenedRun,
    ) -> None:
        self.deps, self.record, self.package, self.workflow = deps, record, package, opened.workflow
        self.graph = opened.workflow.graph
        self.intent, self.user_input, self.on_event, self.control = intent, user_input, on_event, control
        self.audit, self.reporter, self.history = opened.audit, opened.reporter, opened.history
        self.state_dir = state_dir = opened.state_dir
        self.last_text: str | None = None
        self.fm = fm = opened.fm
        workflow, audit, reporter, history = opened.workflow, opened.audit, opened.reporter, opened.history
        self.complete = run_state.is_complete(fm, self.graph)
        self.state_version = 1  # bumped on every state reload, so the prompt prefix is rebuilt
        self.mounts = Mounts(project=Path(record.workspace), pkg=package.root, state=state_dir,
                             git=git_view(record), off_limits=deps.tools.off_limits)
        self.composer = deps.composer(package)
        self.prompt = RunPrompt(
            self.composer,
            package,
            workflow,
            active_agent_id=record.active_agent_id,
            intent=intent,
            data_context=record.extra.get("data_context") or (),
            budget_tokens=deps.settings.history_budget_tokens,
            full_history=deps.settings.full_history,
        )
        self.confirmation = Confirmation(granted=confirms_state_change(user_input))
        if self.confirmation.granted:
            audit({"kind": "state.confirmed"})  # the operator's audit asks who let a finished run change
        self.recorder = ToolRecorder(
            deps.tools.host,
            history,
            reporter.emit,
            run_id=record.run_id,
            mounts=self.mounts,
            home=deps.store.home,
            results_dir=deps.store.tool_results_dir(record),
            large_result_bytes=deps.settings.large_result_bytes,
        )
        self.approvals = ToolApprovals(history, self.recorder, audit)
        self.turns = ModelTurns(deps, record, self.prompt, history, audit, reporter.emit, control,
                                streaming=on_event is not None)
        self.guard = RunawayGuard(deps.settings).begin(self.graph, fm)
        self.child_input: UserInput | None = None  # for the sub-workflow this run waits on, if it does
        self.anchor = self._anchor()

    async def run(self) -> PumpResult:
        try:
            return await self._drive()
        except CrewError as exc:  # e.g. a state file broken by hand mid-run: fail with its reason
            return await self._fail(exc.code, exc.message)

    async def _drive(self) -> PumpResult:
        ctx = self.tool_context()
        held = self.approvals.held()
        answer = answer_to(self.user_input, held.widget) if held is not None else None
        given = self.user_input
        said_something = given.strip() != "" if isinstance(given, str) else given is not None
        typed = said_something and answer is None  # anything but the decision a held call waits on
        if held is not None and not typed and answer is None:  # resumed while the owner has not decided
            return await self._stop_at(held.widget)
        if held is None and typed:
            self._take_input()
        self.record.last_error = None
        await self.reporter.phase(RunPhase.RUNNING)
        if self.complete and self.record.parent_run_id and held is None:
            return await self._finish(RunPhase.COMPLETED)  # a completed sub-workflow hands back to its caller
        if not self.complete and self.intent in ("start", "resume") and held is None and self._pending_call() is None:
            await self._emit_node_started()
        resumed = None
        if held is not None:
            resumed = await self._resume_held(held, answer, ctx, typed)
            if typed:
                self._take_input()  # after the reply's tool messages, where the model expects it
        return await self._loop(ctx, resumed)

    def _take_input(self) -> None:
        """The user's input: the waiting sub-workflow's, or this run's next message."""
        if self._pending_call() is not None:
            self.child_input = self.user_input
            return
        note = legacy_answer_note(self.user_input)
        if note is not None:
            self.history.append({"role": "user", "content": note}, part="runtime_note", scope=self._scope())
            return
        node = None if self.complete else self._node_id()
        self.history.append(
            {"role": "user", "content": wrap_user_input(self.user_input or "", node)},
            part="user_input",
            nodeId=node,
            scope=self._scope(),
        )

    # ---- the loop ---------------------------------------------------------------

    async def _loop(self, ctx: ToolContext, resumed: Round | None) -> PumpResult:
        closing_turn = False
        if resumed is not None:
            ended = await self._after_round(resumed)
            if ended is not None:
                return ended
            ctx, closing_turn = resumed.ctx, self.complete and not resumed.was_complete
        while True:
            if self.control.stop:
                return await self._wait_user(paused=True, reason="Stopped")
            call = self._pending_call()
            if call is not None:
                moved = await self._call_subworkflow(call, ctx)
                if isinstance(moved, PumpResult):
                    return moved
                ctx = moved
                self.guard.turns_since_progress = 0
                continue
            runaway = self.guard.runaway(self.turns.llm_calls)
            if runaway:
                return await self._fail("ENGINE_MAX_TURNS_EXCEEDED", runaway)
            reply = await self._ask_llm(ctx, closing_turn)
            if isinstance(reply, PumpResult):
                return reply
            self.guard.turns_since_progress += 1
            if reply.content and reply.content.strip():
                self.last_text = reply.content
                text = AssistantText(run_id=self.record.run_id, text=reply.content, agent_id=ctx.agent_id)
                await self.reporter.emit(text)
            if not reply.tool_calls:
                if self.complete:
                    return await self._finish(RunPhase.COMPLETED)
                slip = self.guard.slip_note(reply.content, self.graph, self.fm)
                if slip is not None:  # nudged once; the next turn ending the same way goes to the user
                    self.audit({"kind": "engine.nudged", "nodeId": self._node_id()})
                    self.history.append({"role": "user", "content": slip}, part="runtime_note", scope=self._scope())
                    continue
                return await self._wait_user()
            done = await self._run_tools(reply.tool_calls, ctx)
            ended = await self._after_round(done)
            if ended is not None:
                return ended
            ctx, closing_turn = done.ctx, self.complete and not done.was_complete  # one more turn to close

    async def _after_round(self, done: Round) -> PumpResult | None:
        """How a round of tool calls ends the pump, if it does."""
        if self.complete and not done.was_complete and self.record.parent_run_id and done.widget is None:
            return await self._finish(RunPhase.COMPLETED)  # no closing turn: the caller speaks next
        if done.widget is not None:
            return await self._stop_at(done.widget)
        verdict = self.guard.verdict()
        if verdict == "stop":
            return await self._wait_user(
                reason=f"The model kept repeating a failing {self.guard.tool} call; stopped so you can help. "
                "Reply to continue.",
                error=RunError(
                    code="ENGINE_LOOP_DETECTED", message="The same tool call failed repeatedly with the same error."
                ),
            )
        if verdict == "nudge":
            text = self.composer.loop_nudge(self.guard.tool, self.guard.repeats, *self.guard.error_parts())
            self.history.append({"role": "user", "content": text}, part="runtime_note", scope=self._scope())
        if self.control.pause:
            return await self._wait_user(paused=True, reason="Paused")
        return None

    async def _stop_at(self, widget: dict[str, Any]) -> PumpResult:
        await self.reporter.emit(WidgetRequested(run_id=self.record.run_id, widget=widget))
        return await self._wait_user(widget=widget)

    async def _run_tools(self, calls: Sequence[ToolCall], ctx: ToolContext, *, refuse_approvals: bool = False,
                         question: dict[str, Any] | None = None) -> Round:
        """Execute the calls in order, up to the first that waits for approval (the rest run after
        the decision). `refuse_approvals`: the owner typed instead of deciding, so none is asked.
        `question`: a ui_ask_user widget an earlier call of the same reply asked."""
        done = Round(question, ctx, self.complete)
        for call in calls:
            before = self._progress()
            scope = self._scope()
            outcome = await self.recorder.run(call, done.ctx, scope=scope)
            if outcome.approval is not None and refuse_approvals:
                outcome = await self.approvals.refuse_unasked(call, outcome.approval, scope, done.ctx)
            elif outcome.approval is not None:
                done.widget = self.approvals.hold(call, outcome.approval, scope, question=done.widget)
                break
            if outcome.widget is not None:
                done.widget = outcome.widget
            done.ctx = await self._absorb(call, outcome, done.ctx, before)
        return done

    async def _resume_held(
        self, held: HeldCall, answer: ApprovalDecision | None, ctx: ToolContext, typed: bool
    ) -> Round:
        """The owner decided (or typed instead): the held call's tool message, then the rest of its reply."""
        await self.deps.tools.host.prepare(ctx)  # after a restart the MCP servers start again for the call
        was_complete = self.complete
        before = self._progress()
        outcome, ctx = await self.approvals.decide(held, answer, ctx)
        ctx = await self._absorb(held.call, outcome, ctx, before)
        done = await self._run_tools(held.rest, ctx, refuse_approvals=typed, question=held.question)
        done.was_complete = was_complete
        return done

    async def _absorb(
        self, call: ToolCall, outcome: ToolOutcome, ctx: ToolContext, before: tuple[str, int]
    ) -> ToolContext:
        """Take in what one recorded call changed; returns the context for the next calls (another
        agent's policy after a node change)."""
        if outcome.state_changed or outcome.artifacts_created:
            self._reload_state(outcome.state)
            if self._progress()[0] != before[0] or self._progress()[1] > before[1]:
                self.guard.turns_since_progress = 0  # the state advanced: a legitimate turn, not a runaway
            await self._state_updated()
            ctx = await self._reanchor(ctx)
        self.guard.observe(call.name, call.arguments, outcome)
        return ctx

    def _progress(self) -> tuple[str, int]:
        return self._node_id(), len(self.fm.get("stepsCompleted") or ())

    # ---- one LLM call -------------------------------------------------------------

    async def _ask_llm(self, ctx: ToolContext, closing_turn: bool) -> LLMReply | PumpResult:
        asked = ModelAsk(self.fm, complete=self.complete, state_version=self.state_version,
                         closing_turn=closing_turn, scope=self._scope(), node_id=self._node_id())
        reply = await self.turns.ask(ctx, asked)
        if not isinstance(reply, TurnEnded):
            return reply
        if reply.error is None:
            return await self._wait_user(paused=True, reason="Stopped")
        if reply.error.code == BUDGET_CODE:
            return await self._wait_user(paused=True, reason=reply.error.message, error=reply.error)
        return await self._fail(reply.error.code, reply.error.message)

    # ---- sub-workflows ------------------------------------------------------------

    def _pending_call(self) -> subflow.SubworkflowCall | None:
        """The sub-workflow the current node runs, while the run stands on a subworkflow node."""
        if self.complete:
            return None
        return subflow.call_at(self.package, self.workflow, self._node_id())

    async def _call_subworkflow(self, call: subflow.SubworkflowCall, ctx: ToolContext) -> ToolContext | PumpResult:
        """Pump the child run; when it completed, move past the node and return the next context."""
        user_input, self.child_input = self.child_input, None
        caller = subflow.Caller(
            record=self.record,
            package=self.package,
            fm=self.fm,
            agent_id=effective_agent_id(self.graph, self.fm, self.record.active_agent_id),
            state_dir=self.state_dir,
            control=self.control,
            on_event=self.on_event,
            emit=self.reporter.emit,
            audit=self.audit,
        )
        outcome = await subflow.run_call(self.deps, call, caller, user_input)
        result = outcome.result
        self.turns.llm_calls += result.llm_calls
        self.turns.llm_seconds += result.llm_seconds
        self.last_text = result.assistant_text or self.last_text
        if result.phase is RunPhase.FAILED:
            error = result.error or RunError(code="SUBWORKFLOW_FAILED", message="it stopped unexpectedly")
            return await self._fail(error.code, f"Sub-workflow '{call.workflow.display_name}' failed: {error.message}")
        if outcome.returned is None:
            reason = ("Stopped" if self.control.stop else "Paused") if result.paused else None
            return await self._wait_user(paused=result.paused, reason=reason, widget=result.widget, error=result.error)
        returned = outcome.returned
        self._reload_state(returned.frontmatter)
        self.history.append({"role": "user", "content": returned.note}, part="runtime_note", scope=self._scope())
        await self._state_updated()
        await self.reporter.emit(subflow.returned_event(self.record, call, outcome.child, returned))
        return await self._reanchor(ctx)

    # ---- tools ----------------------------------------------------------------

    def tool_context(self) -> ToolContext:
        """The context of the run's next calls: the active agent's policy, the owner's standing permissions."""
        agent_id = effective_agent_id(self.graph, self.fm, self.record.active_agent_id)
        agent = self.package.agent(agent_id)
        return ToolContext(
            mounts=self.mounts,
            policy=effective_policy(self.deps.settings.system_policy, agent),
            mode="run",
            agent_id=agent_id,
            run_id=self.record.run_id,
            graph=self.graph,
            confirmation=self.confirmation,
            audit=self.audit,
            allowed_for_run=self.approvals.allowed_for_run(),
            stop_requested=lambda: self.control.stop,
        )

    # ---- state ----------------------------------------------------------------

    def _reload_state(self, written: dict[str, Any] | None = None) -> None:
        """The state as a tool just wrote it, else as on disk."""
        self.fm = written if written is not None else run_state.read_state(self.state_dir)
        self.complete = run_state.is_complete(self.fm, self.graph)
        self.state_version += 1

    def _scope(self) -> str:
        """Which turns a message belongs to: the active node's, or the post-completion chat's."""
        return POST_COMPLETION_SCOPE if self.complete else self._node_id()

    def _node_id(self) -> str:
        return self.graph.effective_node_id(self.fm.get("currentNodeId"))

    def _anchor(self) -> tuple[str | None, str]:
        agent = effective_agent_id(self.graph, self.fm, self.record.active_agent_id)
        return (None if self.complete else self._node_id(), agent)

    async def _state_updated(self) -> None:
        await self.reporter.state_updated(self.fm, self.graph, node_id=self._node_id(), complete=self.complete)

    async def _reanchor(self, ctx: ToolContext) -> ToolContext:
        """A new node or agent: tell the surface, and use the new agent's policy for the next calls."""
        anchor = self._anchor()
        if anchor == self.anchor:
            return ctx
        self.anchor = anchor
        if anchor[0] is not None:
            await self._emit_node_started()
        return self.tool_context()

    async def _emit_node_started(self) -> None:
        agent_id = effective_agent_id(self.graph, self.fm, self.record.active_agent_id)
        await self.reporter.node_started(self.graph, self._node_id(), agent_id)

    # ---- endings ----------------------------------------------------------------

    def _result(self, phase: RunPhase, **extra: Any) -> PumpResult:
        return PumpResult(
            run_id=self.record.run_id,
            phase=phase,
            assistant_text=self.last_text,
            llm_calls=self.turns.llm_calls,
            llm_seconds=self.turns.llm_seconds,
            **extra,
        )

    async def _finish(self, phase: RunPhase) -> PumpResult:
        await self.reporter.phase(phase)
        return self._result(phase)

    async def _wait_user(
        self,
        *,
        paused: bool = False,
        reason: str | None = None,
        widget: dict[str, Any] | None = None,
        error: RunError | None = None,
    ) -> PumpResult:
        done = self.complete and error is None and widget is None
        phase = RunPhase.COMPLETED if done else RunPhase.WAITING_USER
        paused = paused and not done  # a completed run has nothing left to resume
        await self.reporter.phase(phase, paused=paused, reason=reason, error=error)
        return self._result(phase, paused=paused, widget=widget, error=error)

    async def _fail(self, code: str, message: str) -> PumpResult:
        error = RunError(code=code, message=message)
        await self.reporter.phase(RunPhase.FAILED, reason=message, error=error)
        return self._result(RunPhase.FAILED, error=error)


def git_view(record: RunRecord) -> GitView | None:
    """The run's own repository for the sandbox, from the record; none for older runs or a sub-folder project."""
    worktree = record.worktree
    if worktree is None or worktree.git_dir is None or Path(worktree.path) != Path(worktree.root):
        return None
    borrowed = Path(worktree.borrowed_objects) if worktree.borrowed_objects else None
    return GitView(git_dir=Path(worktree.git_dir), borrowed_objects=borrowed)
