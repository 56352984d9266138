"""One pump: a user input in, as many LLM/tool turns as the workflow needs (D§2.5–2.7).

A pump stops at the first assistant reply without tool calls (WaitingUser, or Completed), at a
`ui_ask_user` widget, on pause/stop between turns, on a runaway loop, or on an LLM failure. Every
message is in the conversation log before the next step and every state write is validated and
atomic, so a killed process resumes from `@state/workflow.md` + the log.

The prompt is composed incrementally (core.prompts.run_prompt), tool calls are executed and
recorded by core.run.tool_round, and progress is reported by core.run.reporter; this module is the
loop itself: turns, the state as the model changes it, and how a pump ends.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..document import state as run_state
from . import mcp_approval, subflow
from ..base.atomic import remove_stale_temps
from ..base.errors import CrewError
from ..base.events import AssistantText, AssistantTextDelta, EngineEvent, LLMRetrying, RunPhase, WidgetRequested
from .engine_model import EventSink, Intent, PumpResult
from ..store.history import POST_COMPLETION_SCOPE, estimate_tokens, message_tokens
from ..model.client import LLMReply
from ..model.wire import ToolSet
from ..package.models import Package, Workflow
from ..tools.policy import effective_policy
from ..prompts.composer import effective_agent_id
from ..prompts.run_prompt import RunPrompt
from ..base.wrappers import confirms_state_change, wrap_user_input
from .reporter import RunReporter
from .pump_deps import PumpControl, PumpDeps
from .runaway import RunawayGuard
from ..store.runs_model import RunError, RunRecord
from .tool_round import ToolRecorder
from ..tools.base import Confirmation, Mounts, ToolContext
from ..tools.registry import wire_name

Message = dict[str, Any]
REPLY_ALLOWANCE_TOKENS = 1_000  # what a reply may add to a call, for the token budget check



class PumpEnded(Exception):
    """Internal: the pump ends with this result."""

    def __init__(self, result: PumpResult) -> None:
        self.result = result


@dataclass
class Pump:
    deps: PumpDeps
    record: RunRecord
    package: Package
    intent: Intent
    user_input: str | None
    on_event: EventSink | None
    control: PumpControl
    llm_calls: int = 0
    llm_seconds: float = 0.0
    last_text: str | None = None
    fm: dict[str, Any] = field(default_factory=dict)
    complete: bool = False
    state_version: int = 0  # bumped on every state reload, so the prompt prefix is rebuilt

    # ---- setup ------------------------------------------------------------------

    async def run(self) -> PumpResult:
        try:
            try:
                await self._run()
            except CrewError as exc:  # e.g. a state file broken by hand mid-run: fail with its reason
                await self._fail(exc.code, exc.message)
        except PumpEnded as ended:
            if hasattr(self, "history"):
                self.deps.histories.keep(self.history)  # the next pump of this run need not re-read the log
            return ended.result
        finally:
            self._release_logs()
        raise AssertionError("a pump only ends with PumpEnded")  # pragma: no cover

    def _release_logs(self) -> None:
        if hasattr(self, "audit"):
            self.audit.log.release()
        if hasattr(self, "history") and self.history.log is not None:
            self.history.log.release()

    async def _run(self) -> None:
        deps, record = self.deps, self.record
        self.audit = deps.store.audit_sink(record)
        self.audit.log.hold()  # this pump alone writes the run's logs until it ends: keep them open
        self.reporter = RunReporter(record, deps.runs, self.audit, self.on_event)
        workflow = self.package.workflow(record.workflow_id)
        if workflow is None:
            await self._fail(
                "WORKFLOW_NOT_FOUND",
                f"Package '{self.package.id}' no longer has workflow '{record.workflow_id}'; load the package "
                "version this run was started with.",
            )
        self.workflow: Workflow = workflow
        self.graph = workflow.graph
        self.state_dir = deps.store.state_dir(record)
        removed = remove_stale_temps(self.state_dir)  # left by a process killed mid-write; this pump alone writes here
        if removed:
            self.audit({"kind": "state.temp_removed", "files": removed})
        self.mounts = Mounts(project=Path(record.workspace), pkg=self.package.root, state=self.state_dir)
        self.composer = deps.composer(self.package)
        self.prompt = RunPrompt(
            self.composer,
            self.package,
            workflow,
            active_agent_id=record.active_agent_id,
            intent=self.intent,
            data_context=record.extra.get("data_context") or (),
            budget_tokens=deps.settings.history_budget_tokens,
            full_history=deps.settings.full_history,
        )
        self.confirmation = Confirmation(granted=confirms_state_change(self.user_input))
        try:
            self.history = deps.histories.open(deps.store.conversation_log(record))
            if self.history.log is not None:
                self.history.log.hold()
            self._reload_state()
        except CrewError as exc:
            await self._fail(exc.code, f"The run state cannot be read: {exc.message}")
        self.recorder = ToolRecorder(
            deps.tools,
            self.history,
            self.reporter.emit,
            run_id=record.run_id,
            mounts=self.mounts,
            home=deps.store.home,
            results_dir=deps.store.tool_results_dir(record),
            large_result_bytes=deps.settings.large_result_bytes,
        )
        self.child_input: str | None = None  # for the sub-workflow this run waits on, if it does
        if self.user_input is not None and self.user_input.strip():
            if self._pending_call() is not None:
                self.child_input = self.user_input
            elif not await mcp_approval.settle_in_pump(self):  # an MCP approval answer is the call's outcome
                node = None if self.complete else self._node_id()
                self.history.append(
                    {"role": "user", "content": wrap_user_input(self.user_input, node)},
                    part="user_input",
                    nodeId=node,
                    scope=self._scope(),
                )
        record.last_error = None
        await self.reporter.phase(RunPhase.RUNNING)
        self.anchor = self._anchor()
        if self.complete and record.parent_run_id:
            await self._finish(RunPhase.COMPLETED)  # a completed sub-workflow hands back to its caller
        if not self.complete and self.intent in ("start", "resume") and self._pending_call() is None:
            await self._emit_node_started()
        await self._loop()

    # ---- the loop ---------------------------------------------------------------

    async def _loop(self) -> None:
        guard = RunawayGuard(self.deps.settings).begin(self.graph, self.fm)
        closing_turn = False
        ctx = self._tool_context()
        while True:
            if self.control.stop:
                await self._wait_user(paused=True, reason="Stopped")
            call = self._pending_call()
            if call is not None:
                ctx = await self._call_subworkflow(call, ctx)
                guard.turns_since_progress = 0
                continue
            runaway = guard.runaway(self.llm_calls)
            if runaway:
                await self._fail("ENGINE_MAX_TURNS_EXCEEDED", runaway)
            reply = await self._ask_llm(ctx, closing_turn)
            guard.turns_since_progress += 1
            if reply.content and reply.content.strip():
                self.last_text = reply.content
                text = AssistantText(run_id=self.record.run_id, text=reply.content, agent_id=ctx.agent_id)
                await self.reporter.emit(text)
            if not reply.tool_calls:
                if self.complete:
                    await self._finish(RunPhase.COMPLETED)
                slip = guard.slip_note(reply.content, self.graph, self.fm)
                if slip is not None:  # nudged once; the next turn ending the same way goes to the user
                    self.audit({"kind": "engine.nudged", "nodeId": self._node_id()})
                    self.history.append({"role": "user", "content": slip}, part="runtime_note", scope=self._scope())
                    continue
                await self._wait_user()

            was_complete = self.complete
            widget, ctx = await self._run_tools(reply, ctx, guard)
            if self.complete and not was_complete and self.record.parent_run_id and widget is None:
                await self._finish(RunPhase.COMPLETED)  # no closing turn: the caller speaks next
            if widget is not None:
                await self.reporter.emit(WidgetRequested(run_id=self.record.run_id, widget=widget))
                await self._wait_user(widget=widget)
            verdict = guard.verdict()
            if verdict == "stop":
                await self._wait_user(
                    reason=f"The model kept repeating a failing {guard.tool} call; stopped so you can help. "
                    "Reply to continue.",
                    error=RunError(
                        code="ENGINE_LOOP_DETECTED", message="The same tool call failed repeatedly with the same error."
                    ),
                )
            if verdict == "nudge":
                text = self.composer.loop_nudge(guard.tool, guard.repeats, *guard.error_parts())
                self.history.append({"role": "user", "content": text}, part="runtime_note", scope=self._scope())
            closing_turn = self.complete and not was_complete  # SPEC §9.5: one more turn for the closing reply
            if self.control.pause:
                await self._wait_user(paused=True, reason="Paused")

    async def _run_tools(
        self, reply: LLMReply, ctx: ToolContext, guard: RunawayGuard
    ) -> tuple[dict[str, Any] | None, ToolContext]:
        """Execute the calls in order; returns the widget if the model asked the user something,
        and the context for the next calls (another agent's policy after a node change)."""
        widget: dict[str, Any] | None = None
        for call in reply.tool_calls:
            node_before, steps_before = self._node_id(), len(self.fm.get("stepsCompleted") or ())
            outcome = await self.recorder.run(call, ctx, scope=self._scope())
            if outcome.widget is not None:
                widget = outcome.widget
            if outcome.state_changed or outcome.artifacts_created:
                self._reload_state(outcome.state)
                if self._node_id() != node_before or len(self.fm.get("stepsCompleted") or ()) > steps_before:
                    guard.turns_since_progress = 0  # the state advanced: a legitimate turn, not a runaway
                await self._state_updated()
                ctx = await self._reanchor(ctx)
            guard.observe(call.name, call.arguments, outcome)
        return widget, ctx

    # ---- one LLM call -------------------------------------------------------------

    async def _ask_llm(self, ctx: ToolContext, closing_turn: bool) -> LLMReply:
        tools = await self.deps.prepared_tool_set(ctx)
        messages = self.prompt.messages(
            ctx,
            tools.names,
            self.fm,
            complete=self.complete,
            state_version=self.state_version,
            history=self.history,
            closing_turn=closing_turn,
            scope=self._scope(),
        )
        turn = self.llm_calls + 1
        await self._check_token_budget(messages, tools)
        self.audit({"kind": "llm.request", "turn": turn, "messageCount": len(messages), "agentId": ctx.agent_id})

        async def on_retry(attempt: int, reason: str) -> None:
            attempts = self.deps.llm.settings.attempts
            await self.reporter.emit(
                LLMRetrying(run_id=self.record.run_id, attempt=attempt, reason=reason, attempts=attempts)
            )

        async def on_delta(text: str, *, restart: bool = False) -> None:
            piece = AssistantTextDelta(
                run_id=self.record.run_id, text=text, turn=turn, agent_id=ctx.agent_id, restart=restart
            )
            await self.reporter.emit(piece)

        call = self.deps.llm.complete(
            messages,
            tools,
            on_retry=on_retry,
            message_json=self.history.wire_json,
            on_delta=on_delta if self.on_event is not None else None,
        )
        task = asyncio.create_task(call)
        self.control.llm_task = task
        started = time.perf_counter()
        try:
            reply = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self.control.stop and task.cancelled() and not (current and current.cancelling()):
                await self._wait_user(paused=True, reason="Stopped")
            raise
        except CrewError as exc:
            self.audit({"kind": "llm.error", "turn": turn, "code": exc.code, "message": exc.message})
            self.history.append(
                {"role": "assistant", "content": f"LLM_ERROR {exc.code}: {exc.message}"},
                part="error",
                scope=self._scope(),
            )
            await self._fail(exc.code, exc.message)
        finally:
            self.llm_seconds += time.perf_counter() - started
            self.control.llm_task = None
        self.llm_calls += 1
        self.record.usage.add(reply.usage, 0 if reply.usage is not None else _prompt_estimate(messages, tools))
        message: Message = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in reply.tool_calls
            ]
        message.update(reply.extra)
        self.history.append(
            message, part="assistant", agentId=ctx.agent_id, nodeId=self._node_id(), scope=self._scope()
        )
        self.audit(
            {
                "kind": "llm.response",
                "turn": turn,
                "toolCalls": [wire_name(c.name) for c in reply.tool_calls],
                "finishReason": reply.finish_reason,
                "usage": reply.usage,
            }
        )
        return reply

    async def _check_token_budget(self, messages: list[Message], tools: ToolSet) -> None:
        """Pause before a call that would take the run past its token budget (resumable with a higher one)."""
        budget = self.record.token_budget or self.deps.settings.run_token_budget
        if budget is None:
            return
        used = self.record.usage.total_tokens
        needed = _prompt_estimate(messages, tools) + REPLY_ALLOWANCE_TOKENS
        if used + needed <= budget:
            return
        message = (
            f"Paused before the next model call: this run has used {used:,} of its {budget:,}-token budget "
            f"and the call would need about {needed:,} more. Raise the run's token budget to continue."
        )
        await self._wait_user(paused=True, reason=message, error=RunError(code="RUN_TOKEN_BUDGET", message=message))

    # ---- sub-workflows ------------------------------------------------------------

    def _pending_call(self) -> subflow.SubworkflowCall | None:
        """The sub-workflow the current node runs, while the run stands on a subworkflow node."""
        if self.complete:
            return None
        return subflow.call_at(self.package, self.workflow, self._node_id())

    async def _call_subworkflow(self, call: subflow.SubworkflowCall, ctx: ToolContext) -> ToolContext:
        """Pump the child run until it completes, then move past the node and return the next context.

        When the child needs the user (a question, a widget, a pause or stop, a failure), this pump
        ends the same way; the next pump of this run goes on with the child.
        """
        deps, record = self.deps, self.record
        agent_id = effective_agent_id(self.graph, self.fm, record.active_agent_id)
        child, created = subflow.open_child(deps.runs, record, self.package, call, self.fm, agent_id)
        user_input, self.child_input = self.child_input, None
        await self.reporter.emit(subflow.started_event(record, call, self.workflow.id, child, created))
        self.audit({"kind": "subworkflow.started", "nodeId": call.node.id, "childRunId": child.run_id,
                    "workflowId": call.workflow.id, "resumed": not created})
        intent: Intent = "start" if created else ("continue" if user_input else "resume")
        spent_before = child.usage.model_copy()
        result = await deps.run_child(child, self.package, intent, user_input, self._child_sink(), self.control)
        record.usage.add_since(child.usage, spent_before)  # the caller's usage covers its sub-workflows
        self.llm_calls += result.llm_calls
        self.llm_seconds += result.llm_seconds
        self.last_text = result.assistant_text or self.last_text
        name = call.workflow.display_name
        if result.phase is RunPhase.FAILED:
            error = result.error or RunError(code="SUBWORKFLOW_FAILED", message="it stopped unexpectedly")
            await self._fail(error.code, f"Sub-workflow '{name}' failed: {error.message}")
        if result.phase is not RunPhase.COMPLETED:
            reason = ("Stopped" if self.control.stop else "Paused") if result.paused else None
            await self._wait_user(paused=result.paused, reason=reason, widget=result.widget, error=result.error)
        child_fm = run_state.read_state(deps.store.state_dir(child))
        returned = subflow.return_to_caller(self.state_dir, call, child.run_id, child_fm)
        record.child_run_id = None
        deps.runs.update(record)
        self.audit({"kind": "subworkflow.returned", "nodeId": call.node.id, "childRunId": child.run_id,
                    "variables": sorted(returned.variables), "artifacts": returned.artifacts})
        self._reload_state(returned.frontmatter)
        self.history.append({"role": "user", "content": returned.note}, part="runtime_note", scope=self._scope())
        await self._state_updated()
        await self.reporter.emit(subflow.returned_event(record, call, child, returned))
        return await self._reanchor(ctx)

    def _child_sink(self) -> EventSink | None:
        """The child's events go to this run's surface, marked with this run as their parent."""
        on_event = self.on_event
        if on_event is None:
            return None
        parent_id = self.record.run_id

        async def sink(event: EngineEvent) -> None:
            if event.parent_run_id is None:
                event = event.model_copy(update={"parent_run_id": parent_id})
            await on_event(event)

        return sink

    # ---- tools ----------------------------------------------------------------

    def _tool_context(self) -> ToolContext:
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
        return self._tool_context()

    async def _emit_node_started(self) -> None:
        agent_id = effective_agent_id(self.graph, self.fm, self.record.active_agent_id)
        await self.reporter.node_started(self.graph, self._node_id(), agent_id)

    # ---- endings ----------------------------------------------------------------

    def _result(self, phase: RunPhase, **extra: Any) -> PumpResult:
        return PumpResult(
            run_id=self.record.run_id,
            phase=phase,
            assistant_text=self.last_text,
            llm_calls=self.llm_calls,
            llm_seconds=self.llm_seconds,
            **extra,
        )

    async def _finish(self, phase: RunPhase) -> None:
        await self.reporter.phase(phase)
        raise PumpEnded(self._result(phase))

    async def _wait_user(
        self,
        *,
        paused: bool = False,
        reason: str | None = None,
        widget: dict[str, Any] | None = None,
        error: RunError | None = None,
    ) -> None:
        done = self.complete and error is None and widget is None
        phase = RunPhase.COMPLETED if done else RunPhase.WAITING_USER
        paused = paused and not done  # a completed run has nothing left to resume
        await self.reporter.phase(phase, paused=paused, reason=reason, error=error)
        raise PumpEnded(self._result(phase, paused=paused, widget=widget, error=error))

    async def _fail(self, code: str, message: str) -> None:
        error = RunError(code=code, message=message)
        await self.reporter.phase(RunPhase.FAILED, reason=message, error=error)
        raise PumpEnded(self._result(RunPhase.FAILED, error=error))


def _prompt_estimate(messages: list[Message], tools: ToolSet) -> int:
    """Our estimate of a request's prompt tokens, for the budget and for endpoints that report no usage."""
    return sum(message_tokens(m) for m in messages) + estimate_tokens(tools.json)
