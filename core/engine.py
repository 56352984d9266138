"""The execution engine: one user input in, as many LLM/tool turns as the workflow needs (D§2.5–2.7).

A pump stops at the first assistant reply without tool calls (WaitingUser, or Completed), at a
`ui_ask_user` widget, on pause/stop between turns, on a runaway loop, or on an LLM failure. State
on disk is always consistent: every state write is validated and atomic, every message is
persisted before the next step, so a killed process resumes from `@state/workflow.md` + the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from . import state as run_state
from .conversation import ConversationReply, converse
from .errors import CrewError
from .events import (
    ArtifactWritten,
    AssistantText,
    EngineEvent,
    LLMRetrying,
    NodeStarted,
    PhaseChanged,
    RunPhase,
    StateUpdated,
    ToolExecuted,
    WidgetRequested,
)
from .history import DEFAULT_BUDGET_TOKENS, LARGE_RESULT_BYTES, History, message_tokens, offload_large_result
from .llm import LLMClient, LLMReply
from .package.models import Agent, Package, Workflow
from .policy import SystemToolPolicy, effective_policy
from .prompts.composer import PromptComposer, effective_agent_id
from .prompts.wrappers import confirms_state_change, wrap_user_input
from .runs import RunManager
from .runs_model import RunError, RunRecord
from .store import RuntimeStore
from .tools.base import Confirmation, Mounts, ToolContext, ToolOutcome
from .tools.registry import ToolHost, wire_name

log = logging.getLogger(__name__)

Intent = Literal["start", "continue", "resume"]
EventSink = Callable[[EngineEvent], Awaitable[None]]


class EngineSettings(BaseModel):
    max_turns_without_progress: int = 40  # runaway guard: LLM turns since the state last advanced
    max_turns_per_pump: int = 400  # absolute ceiling per user input
    repeated_failure_limit: int = 3  # identical failing calls before the nudge
    history_budget_tokens: int = DEFAULT_BUDGET_TOKENS
    step_inline_max_bytes: int = 16_384
    large_result_bytes: int = LARGE_RESULT_BYTES
    conversation_max_turns: int = 12
    system_policy: SystemToolPolicy = SystemToolPolicy()


class PumpResult(BaseModel):
    run_id: str
    phase: RunPhase
    paused: bool = False
    assistant_text: str | None = None  # the last thing the model said to the user in this pump
    widget: dict[str, Any] | None = None  # set when the pump stopped at ui_ask_user
    error: RunError | None = None  # why it failed, or a warning such as ENGINE_LOOP_DETECTED
    llm_calls: int = 0
    llm_seconds: float = 0.0  # time spent awaiting the model, for overhead measurements


@dataclass
class _Control:
    pause: bool = False
    stop: bool = False
    llm_task: asyncio.Task[LLMReply] | None = None


class Engine:
    def __init__(
        self,
        store: RuntimeStore,
        runs: RunManager,
        llm: LLMClient,
        settings: EngineSettings | None = None,
        tools: ToolHost | None = None,
    ) -> None:
        self.store = store
        self.runs = runs
        self.llm = llm
        self.settings = settings or EngineSettings()
        self.tools = tools or ToolHost()
        self._active: dict[str, _Control] = {}
        self._composers: dict[tuple[str, str], PromptComposer] = {}

    # ---- control ------------------------------------------------------------

    def is_pumping(self, run_id: str) -> bool:
        return run_id in self._active

    def request_pause(self, run_id: str) -> bool:
        """Finish the current turn, then stop in WaitingUser (paused). False if the run is idle."""
        control = self._active.get(run_id)
        if control is None:
            return False
        control.pause = True
        return True

    def request_stop(self, run_id: str) -> bool:
        """Stop between turns, abandoning an LLM call in flight; the run stays resumable."""
        control = self._active.get(run_id)
        if control is None:
            return False
        control.stop = True
        if control.llm_task is not None and not control.llm_task.done():
            control.llm_task.cancel()
        return True

    def interrupted_runs(self, project_root: str | Path | None = None) -> list[RunRecord]:
        """Runs left in phase `running` by a process that died; a surface offers to resume them."""
        return [
            r for r in self.runs.list(project_root) if r.phase == RunPhase.RUNNING and not self.is_pumping(r.run_id)
        ]

    def composer(self, package: Package) -> PromptComposer:
        key = (package.id, str(package.root))
        found = self._composers.get(key)
        if found is None or found.package is not package:  # a reloaded package gets fresh caches
            found = self._composers[key] = PromptComposer(
                package, step_inline_max_bytes=self.settings.step_inline_max_bytes
            )
        return found

    # ---- entry points -------------------------------------------------------

    async def pump(
        self,
        record: RunRecord,
        package: Package,
        *,
        intent: Intent = "continue",
        user_input: str | None = None,
        on_event: EventSink | None = None,
    ) -> PumpResult:
        """Drive the run until it needs the user. Mutates and persists `record` (phase, errors)."""
        if record.run_id in self._active:
            raise CrewError("RUN_BUSY", "This run is already working; wait for it, or pause/stop it first.")
        control = self._active[record.run_id] = _Control()
        try:
            return await _Pump(self, record, package, intent, user_input, on_event, control).run()
        finally:
            self._active.pop(record.run_id, None)

    async def converse(
        self,
        package: Package,
        agent: Agent | None,
        history: list[dict[str, Any]],
        user_text: str,
        *,
        project_root: str | Path,
        mode: Literal["agent", "chat", "script"] | None = None,
        extra_context: Sequence[str] = (),
    ) -> ConversationReply:
        """Agent persona chat, ChatMode, exec scripts and prompt actions (see core.conversation)."""
        return await converse(
            self.llm,
            package,
            agent,
            history,
            user_text,
            project_root=project_root,
            mode=mode,
            extra_context=extra_context,
            tools=self.tools,
            system_policy=self.settings.system_policy,
            max_turns=self.settings.conversation_max_turns,
            budget_tokens=self.settings.history_budget_tokens,
            composer=self.composer(package),
        )


class _Stop(Exception):
    """Internal: the pump ends with this result."""

    def __init__(self, result: PumpResult) -> None:
        self.result = result


@dataclass
class _Pump:
    engine: Engine
    record: RunRecord
    package: Package
    intent: Intent
    user_input: str | None
    on_event: EventSink | None
    control: _Control
    llm_calls: int = 0
    llm_seconds: float = 0.0
    last_text: str | None = None
    fm: dict[str, Any] = field(default_factory=dict)
    complete: bool = False
    spec_cache: dict[Any, list[dict[str, Any]]] = field(default_factory=dict)

    # ---- setup ------------------------------------------------------------------

    async def run(self) -> PumpResult:
        try:
            try:
                await self._run()
            except CrewError as exc:  # e.g. a state file broken by hand mid-run: fail with its reason
                await self._fail(exc.code, exc.message)
        except _Stop as stop:
            return stop.result
        raise AssertionError("a pump only ends with _Stop")  # pragma: no cover

    async def _run(self) -> None:
        engine, record = self.engine, self.record
        workflow = self.package.workflow(record.workflow_id)
        if workflow is None:
            await self._fail(
                "WORKFLOW_NOT_FOUND",
                f"Package '{self.package.id}' no longer has workflow '{record.workflow_id}'; load the package "
                "version this run was started with.",
            )
        self.workflow: Workflow = workflow
        self.graph = workflow.graph
        self.state_dir = engine.store.state_dir(record)
        self.mounts = Mounts(project=Path(record.project_root), pkg=self.package.root, state=self.state_dir)
        self.composer = engine.composer(self.package)
        self.redactions = _redactions(self.mounts, engine.store.home)
        self.audit = engine.store.audit_sink(record)
        self.confirmation = Confirmation(granted=confirms_state_change(self.user_input))
        try:
            self.history = History.load(engine.store.conversation_log(record))
            self._reload_state()
        except CrewError as exc:
            await self._fail(exc.code, f"The run state cannot be read: {exc.message}")
        if self.user_input is not None and self.user_input.strip():
            node = None if self.complete else self._node_id()
            self.history.append(
                {"role": "user", "content": wrap_user_input(self.user_input, node)}, part="user_input", nodeId=node
            )
        record.last_error = None
        await self._set_phase(RunPhase.RUNNING)
        self.anchor = self._anchor()
        if not self.complete and self.intent in ("start", "resume"):
            await self._emit_node_started()
        await self._loop()

    # ---- the loop ---------------------------------------------------------------

    async def _loop(self) -> None:
        guard = _Guard(self.engine.settings)
        closing_turn = False
        while True:
            if self.control.stop:
                await self._wait_user(paused=True, reason="Stopped")
            runaway = guard.runaway(self.llm_calls)
            if runaway:
                await self._fail("ENGINE_MAX_TURNS_EXCEEDED", runaway)
            ctx = self._tool_context()
            reply = await self._ask_llm(ctx, self._specs(ctx), closing_turn)
            guard.turns_since_progress += 1
            if reply.content and reply.content.strip():
                self.last_text = reply.content
                await self._emit(AssistantText(run_id=self.record.run_id, text=reply.content, agent_id=ctx.agent_id))
            if not reply.tool_calls:
                if self.complete:
                    await self._finish(RunPhase.COMPLETED)
                await self._wait_user()

            was_complete = self.complete
            widget = await self._run_tools(reply, ctx, guard)
            if widget is not None:
                await self._emit(WidgetRequested(run_id=self.record.run_id, widget=widget))
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
                self.history.append({"role": "user", "content": text}, part="runtime_note")
            closing_turn = self.complete and not was_complete  # SPEC §9.5: one more turn for the closing reply
            if self.control.pause:
                await self._wait_user(paused=True, reason="Paused")

    async def _run_tools(self, reply: LLMReply, ctx: ToolContext, guard: _Guard) -> dict[str, Any] | None:
        """Execute the calls in order; returns the widget if the model asked the user something."""
        widget: dict[str, Any] | None = None
        for call in reply.tool_calls:
            node_before, steps_before = self._node_id(), len(self.fm.get("stepsCompleted") or ())
            outcome = await self.engine.tools.execute(call.name, call.arguments, ctx, call_id=call.id)
            await self._record_tool_result(call.id, call.name, call.arguments, outcome)
            if outcome.widget is not None:
                widget = outcome.widget
            if outcome.state_changed or outcome.artifacts_created:
                self._reload_state()
                if self._node_id() != node_before or len(self.fm.get("stepsCompleted") or ()) > steps_before:
                    guard.turns_since_progress = 0  # the state advanced: a legitimate turn, not a runaway
                await self._state_updated()
                ctx = await self._reanchor(ctx)
            guard.observe(call.name, call.arguments, outcome)
        return widget

    # ---- one LLM call -------------------------------------------------------------

    async def _ask_llm(self, ctx: ToolContext, specs: list[dict[str, Any]], closing_turn: bool) -> LLMReply:
        agent = self.package.agent(ctx.agent_id)
        if agent is None:  # never run a node without its persona and policy (D§5.2)
            await self._fail(
                "AGENT_NOT_FOUND",
                f"Node '{self._node_id()}' runs as agent '{ctx.agent_id}', which package '{self.package.id}' "
                "does not define. Fix the package and Retry.",
            )
        system = self.composer.system_layers(
            mode="run", agent=agent, policy=ctx.policy, tool_names=[s["function"]["name"] for s in specs]
        )
        anchors = self.composer.run_anchors(
            self.workflow,
            self.fm,
            active_agent_id=self.record.active_agent_id,
            intent=self.intent,
            complete=self.complete,
            data_context=self.record.extra.get("data_context") or (),
        )
        prefix = system + anchors
        notes = [self.composer.closing_note()] if closing_turn else []
        budget = self.engine.settings.history_budget_tokens - sum(message_tokens(m) for m in prefix + notes)
        messages = prefix + self.history.wire(max(budget, 0)) + notes
        turn = self.llm_calls + 1
        self.audit({"kind": "llm.request", "turn": turn, "messageCount": len(messages), "agentId": ctx.agent_id})

        async def on_retry(attempt: int, reason: str) -> None:
            await self._emit(LLMRetrying(run_id=self.record.run_id, attempt=attempt, reason=reason))

        task = asyncio.create_task(self.engine.llm.complete(messages, specs, on_retry=on_retry))
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
                {"role": "assistant", "content": f"LLM_ERROR {exc.code}: {exc.message}"}, part="error"
            )
            await self._fail(exc.code, exc.message)
        finally:
            self.llm_seconds += time.perf_counter() - started
            self.control.llm_task = None
        self.llm_calls += 1
        message: dict[str, Any] = {"role": "assistant", "content": reply.content}
        if reply.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in reply.tool_calls
            ]
        message.update(reply.extra)
        self.history.append(message, part="assistant", agentId=ctx.agent_id, nodeId=self._node_id())
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

    # ---- tools ----------------------------------------------------------------

    def _tool_context(self) -> ToolContext:
        agent_id = effective_agent_id(self.graph, self.fm, self.record.active_agent_id)
        agent = self.package.agent(agent_id)
        return ToolContext(
            mounts=self.mounts,
            policy=effective_policy(self.engine.settings.system_policy, agent),
            mode="run",
            agent_id=agent_id,
            run_id=self.record.run_id,
            graph=self.graph,
            confirmation=self.confirmation,
            audit=self.audit,
        )

    def _specs(self, ctx: ToolContext) -> list[dict[str, Any]]:
        if ctx.policy not in self.spec_cache:
            self.spec_cache[ctx.policy] = self.engine.tools.specs(ctx)
        return self.spec_cache[ctx.policy]

    async def _record_tool_result(self, call_id: str, name: str, arguments: str, outcome: ToolOutcome) -> None:
        text = _redact(json.dumps(outcome.result, ensure_ascii=False, default=str), self.redactions)
        message_id = self.history.next_id()
        text = offload_large_result(
            text,
            message_id=message_id,
            real_dir=self.engine.store.tool_results_dir(self.record),
            alias_dir="@state/logs/tool-results",
            limit=self.engine.settings.large_result_bytes,
        )
        wire = wire_name(name)
        self.history.append(
            {"role": "tool", "tool_call_id": call_id, "content": text}, part="tool_result", toolName=wire
        )
        error = outcome.result.get("error") if not outcome.ok else None
        await self._emit(
            ToolExecuted(
                run_id=self.record.run_id,
                tool=wire,
                ok=outcome.ok,
                summary=_summary(wire, arguments, outcome),
                error_code=(error or {}).get("code") if isinstance(error, dict) else None,
            )
        )
        written = list(outcome.artifacts_created)
        for alias in outcome.files_written:
            rel = alias.removeprefix("@project/")
            if rel.startswith("artifacts/") and rel not in written:
                written.append(rel)
        for path in written:
            await self._emit(ArtifactWritten(run_id=self.record.run_id, path=path))

    # ---- state ----------------------------------------------------------------

    def _reload_state(self) -> None:
        self.fm = run_state.read_state(self.state_dir)
        self.complete = run_state.is_complete(self.fm, self.graph)

    def _node_id(self) -> str:
        return self.graph.effective_node_id(self.fm.get("currentNodeId"))

    def _anchor(self) -> tuple[str | None, str]:
        agent = effective_agent_id(self.graph, self.fm, self.record.active_agent_id)
        return (None if self.complete else self._node_id(), agent)

    async def _state_updated(self) -> None:
        steps = list(self.fm.get("stepsCompleted") or [])
        artifacts = [str(a) for a in self.fm.get("artifacts") or []]
        self.audit(
            {
                "kind": "state.updated",
                "currentNodeId": self._node_id(),
                "stepsCompleted": steps,
                "complete": self.complete,
            }
        )
        await self._emit(
            StateUpdated(
                run_id=self.record.run_id,
                current_node_id=self._node_id(),
                steps_completed=steps,
                steps_total=len(self.graph.nodes),
                artifacts=artifacts,
            )
        )

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
        node = self.graph.node(self._node_id())
        if node is None:
            return
        agent_id = effective_agent_id(self.graph, self.fm, self.record.active_agent_id)
        await self._emit(NodeStarted(run_id=self.record.run_id, node_id=node.id, title=node.label, agent_id=agent_id))

    # ---- endings ----------------------------------------------------------------

    async def _set_phase(
        self, phase: RunPhase, *, paused: bool = False, reason: str | None = None, error: RunError | None = None
    ) -> None:
        record = self.record
        previous = record.phase
        record.phase, record.paused = phase, paused
        if error is not None:
            record.last_error = error
        self.engine.runs.update(record)
        self.audit(
            {
                "kind": "run.phase",
                "from": previous.value,
                "to": phase.value,
                "paused": paused,
                "reason": reason,
                "code": error.code if error else None,
            }
        )
        await self._emit(
            PhaseChanged(
                run_id=record.run_id,
                phase=phase,
                paused=paused,
                reason=reason,
                error_code=error.code if error else None,
            )
        )

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
        await self._set_phase(phase)
        raise _Stop(self._result(phase))

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
        await self._set_phase(phase, paused=paused, reason=reason, error=error)
        raise _Stop(self._result(phase, paused=paused, widget=widget, error=error))

    async def _fail(self, code: str, message: str) -> None:
        error = RunError(code=code, message=message)
        await self._set_phase(RunPhase.FAILED, reason=message, error=error)
        raise _Stop(self._result(RunPhase.FAILED, error=error))

    async def _emit(self, event: EngineEvent) -> None:
        if self.on_event is None:
            return
        try:
            await self.on_event(event)
        except Exception:  # a surface's rendering bug must not corrupt the run
            log.exception("engine event handler failed for %s", type(event).__name__)


# ---- helpers ------------------------------------------------------------------------


@dataclass
class _Guard:
    """Runaway protection (SPEC §9.6, D§2.7): turns without progress, and one failing call on repeat."""

    settings: EngineSettings
    turns_since_progress: int = 0
    fingerprint: str | None = None
    repeats: int = 0
    tool: str = ""
    error: dict[str, Any] = field(default_factory=dict)
    nudged: bool = False

    def runaway(self, llm_calls: int) -> str | None:
        if self.turns_since_progress >= self.settings.max_turns_without_progress:
            limit = f"{self.settings.max_turns_without_progress} turns without advancing the workflow"
        elif llm_calls >= self.settings.max_turns_per_pump:
            limit = f"{self.settings.max_turns_per_pump} turns for one input"
        else:
            return None
        return f"The model used {limit} and was stopped as a runaway. Send a message to steer it, or Retry."

    def observe(self, name: str, arguments: str, outcome: ToolOutcome) -> None:
        if outcome.ok:
            self.fingerprint, self.repeats = None, 0
            return
        fingerprint = _fingerprint(name, arguments)
        self.repeats = self.repeats + 1 if fingerprint == self.fingerprint else 1
        self.fingerprint, self.tool = fingerprint, wire_name(name)
        error = outcome.result.get("error")
        self.error = error if isinstance(error, dict) else {}

    def verdict(self) -> Literal["ok", "nudge", "stop"]:
        """The first time the limit is hit the model gets a nudge; if it still repeats, the user is asked."""
        if self.repeats < self.settings.repeated_failure_limit:
            if self.repeats == 0:
                self.nudged = False
            return "ok"
        if self.nudged:
            return "stop"
        self.nudged = True
        return "nudge"

    def error_parts(self) -> tuple[str, str]:
        return str(self.error.get("code", "")), str(self.error.get("message", ""))


def _fingerprint(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments) if arguments.strip() else {}
        stable = json.dumps(args, sort_keys=True, separators=(",", ":"))
    except ValueError:
        stable = arguments.strip()
    return f"{wire_name(name)}:{stable}"


def _summary(tool: str, arguments: str, outcome: ToolOutcome) -> str:
    """One line, alias paths only: `fs_write @project/artifacts/x.md` or `... — E_SANDBOX_VIOLATION`."""
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        args = {}
    target = ""
    if isinstance(args, dict):
        for key in ("path", "targetNodeId", "widgetId"):
            if isinstance(args.get(key), str):
                target = args[key]
                break
    line = f"{tool} {target}".strip()
    if not outcome.ok:
        error = outcome.result.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        line += f" — {code or 'failed'}"
    return line[:200]


def _redactions(mounts: Mounts, home: Path) -> list[tuple[str, str]]:
    """Real roots → aliases, longest first, so no server path reaches the model."""
    pairs: list[tuple[str, str]] = []
    for real, alias in ((mounts.state, "@state"), (mounts.project, "@project"), (mounts.pkg, "@pkg"), (home, "<runtime-home>")):
        if real is None:
            continue
        for variant in {str(real), str(Path(real).resolve())}:
            pairs.append((variant, alias))
    return sorted(pairs, key=lambda p: len(p[0]), reverse=True)


def _redact(text: str, pairs: Sequence[tuple[str, str]]) -> str:
    for real, alias in pairs:
        if real in text:
            text = text.replace(real, alias)
    return text
