"""The execution engine's front door: start or continue a run's pump, and control it while it runs.

`Engine.pump` drives a run until it needs the user (see core.run.pump for the loop itself);
`request_pause` / `request_stop` act between turns; `converse` serves the one-shot conversations
outside runs (see core.run.conversation). One Engine serves every run of the process and keeps the
per-package prompt caches and the encoded tool specs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from .conversation import ConversationReply, TurnDeltaListener, converse
from .engine_model import EngineSettings, EventSink, Intent, PumpResult
from ..base.answers import UserInput
from ..base.errors import CrewError
from ..base.events import RunPhase
from ..store.history import HistoryCache
from ..model.client import LLMClient
from ..model.wire import ToolSet
from ..package.models import Agent, Package
from ..prompts.composer import PromptComposer
from .pump import pump_run
from .pump_deps import PumpControl, PumpDeps, PumpTools
from ..store.run_manager import RunManager
from ..store.runs_model import RunRecord
from ..store.protocol import RunStore
from ..tools.base import EffectivePolicy, ToolContext
from ..tools.off_limits import OffLimits
from ..tools.registry import ToolHost
from ..tools.shell.script_hookup import with_scripts

__all__ = ["Engine", "EngineSettings", "EventSink", "Intent", "PumpResult"]


class Engine:
    def __init__(
        self,
        store: RunStore,
        runs: RunManager,
        llm: LLMClient,
        settings: EngineSettings | None = None,
        tools: ToolHost | None = None,
    ) -> None:
        self.store = store
        self.runs = runs
        self.llm = llm
        self.settings = settings or EngineSettings()
        commands = self.settings.system_policy.commands
        if commands is not None and commands.scripts_cache is None:  # BMAD scripts' prepared dependencies
            policy = self.settings.system_policy.model_copy(update={"commands": with_scripts(commands, store.home)})
            self.settings = self.settings.model_copy(update={"system_policy": policy})
        self.tools = tools or ToolHost()
        # what no run may touch: the operator's hidden paths and this engine's runtime home (run state,
        # other runs' checkouts), wherever a project or package folder holds them
        self.off_limits = OffLimits.of((*self.settings.system_policy.hidden, store.home))
        self._active: dict[str, PumpControl] = {}
        self._composers: dict[tuple[str, str], PromptComposer] = {}
        self._tool_sets: dict[tuple[str, EffectivePolicy, int], ToolSet] = {}
        self.histories = HistoryCache(self.settings.kept_histories)

    # ---- control ------------------------------------------------------------

    def is_pumping(self, run_id: str) -> bool:
        return run_id in self._active

    def pumping_runs(self) -> list[str]:
        return list(self._active)

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
        """Runs left in phase `running` by a process that died; a surface offers to resume them.
        A sub-workflow's run is not listed: resuming its caller resumes it."""
        return [
            r
            for r in self.runs.list(project_root)
            if r.phase == RunPhase.RUNNING and r.parent_run_id is None and not self.is_pumping(r.run_id)
        ]

    def composer(self, package: Package) -> PromptComposer:
        key = (package.id, str(package.root))
        found = self._composers.get(key)
        if found is None or found.package is not package:  # a reloaded package gets fresh caches
            found = self._composers[key] = PromptComposer(
                package, step_inline_max_bytes=self.settings.step_inline_max_bytes
            )
        return found

    async def prepared_tool_set(self, ctx: ToolContext) -> ToolSet:
        """tool_set() after starting the MCP servers `ctx` may use (on first need; then at once)."""
        await self.tools.prepare(ctx)
        return self.tool_set(ctx)

    def tool_set(self, ctx: ToolContext) -> ToolSet:
        """The tool specs `ctx` may use, encoded once per mode, policy and set of MCP tools (they go out with
        every call)."""
        key = (ctx.mode, ctx.policy, self.tools.generation)
        found = self._tool_sets.get(key)
        if found is None:
            found = self._tool_sets[key] = ToolSet.of(self.tools.specs(ctx))
        return found

    # ---- entry points -------------------------------------------------------

    async def pump(
        self,
        record: RunRecord,
        package: Package,
        *,
        intent: Intent = "continue",
        user_input: UserInput | None = None,
        on_event: EventSink | None = None,
    ) -> PumpResult:
        """Drive the run until it needs the user. Mutates and persists `record` (phase, errors)."""
        return await self.run_pump(record, package, intent, user_input, on_event, PumpControl())

    async def run_pump(
        self,
        record: RunRecord,
        package: Package,
        intent: Intent,
        user_input: UserInput | None,
        on_event: EventSink | None,
        control: PumpControl,
    ) -> PumpResult:
        """One pump under `control`. A calling run pumps its sub-workflow's run with its own control,
        so pause and stop of either run reach whichever of the two is working."""
        if record.run_id in self._active:
            raise CrewError("RUN_BUSY", "This run is already working; wait for it, or pause/stop it first.")
        self._active[record.run_id] = control
        try:
            deps = PumpDeps(
                store=self.store,
                runs=self.runs,
                llm=self.llm,
                settings=self.settings,
                histories=self.histories,
                composer=self.composer,
                tools=PumpTools(self.tools, self.prepared_tool_set, self.off_limits),
                run_child=self.run_pump,
            )
            return await pump_run(deps, record, package, intent, user_input, on_event, control)
        finally:
            self._active.pop(record.run_id, None)

    async def converse(
        self,
        package: Package,
        agent: Agent | None,
        history: list[dict[str, Any]],
        user_text: UserInput,
        *,
        project_root: str | Path,
        mode: Literal["agent", "chat", "script"] | None = None,
        extra_context: Sequence[str] = (),
        on_delta: TurnDeltaListener | None = None,
        model: str | None = None,
    ) -> ConversationReply:
        """Agent persona chat, ChatMode, exec scripts and prompt actions (see core.run.conversation)."""
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
            off_limits=self.off_limits,
            max_turns=self.settings.conversation_max_turns,
            budget_tokens=self.settings.history_budget_tokens,
            composer=self.composer(package),
            on_delta=on_delta,
            model=model,
        )
