"""The messages of each LLM call in a run, composed incrementally.

System layers + run anchors (the "prefix") depend only on the agent, its tool policy and the run
state, so they and their token estimate are rebuilt only when one of those changed; the history
keeps its own per-message estimates. Only the current node's turns follow the prefix: a finished
node is remembered by the state summary (and its files), so a call costs about the same at the
fortieth node as at the first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..base.errors import CrewError
from ..store.history import History, message_tokens
from ..package.models import Package, Workflow
from ..tools.base import ToolContext
from .composer import Intent, PromptComposer

Message = dict[str, Any]


class RunPrompt:
    def __init__(
        self,
        composer: PromptComposer,
        package: Package,
        workflow: Workflow,
        *,
        active_agent_id: str,
        intent: Intent,
        data_context: Sequence[str],
        budget_tokens: int,
        full_history: bool = False,
    ) -> None:
        self.composer, self.package, self.workflow = composer, package, workflow
        self.active_agent_id = active_agent_id
        self.intent = intent
        self.data_context = data_context
        self.budget_tokens = budget_tokens
        self.full_history = full_history
        self._key: tuple[Any, ...] | None = None
        self._prefix: list[Message] = []
        self._prefix_tokens = 0

    def messages(
        self,
        ctx: ToolContext,
        tool_names: Sequence[str],
        fm: dict[str, Any],
        *,
        complete: bool,
        state_version: int,
        history: History,
        closing_turn: bool,
        scope: str,
    ) -> list[Message]:
        """Prefix + as much history as the budget allows (+ the closing note on the closing turn).

        `state_version` must change whenever `fm` does. Raises CrewError AGENT_NOT_FOUND when the
        node's agent is not in the package: a node never runs without its persona and policy.
        """
        key = (ctx.agent_id, ctx.policy, tuple(tool_names), state_version, len(history.answers))
        if key != self._key:
            agent = self.package.agent(ctx.agent_id)
            if agent is None:
                node = self.workflow.graph.effective_node_id(fm.get("currentNodeId"))
                raise CrewError(
                    "AGENT_NOT_FOUND",
                    f"Node '{node}' runs as agent '{ctx.agent_id}', which package '{self.package.id}' "
                    "does not define. Fix the package and Retry.",
                )
            system = self.composer.system_layers(mode="run", agent=agent, policy=ctx.policy, tool_names=tool_names)
            anchors = self.composer.run_anchors(
                self.workflow,
                fm,
                active_agent_id=self.active_agent_id,
                intent=self.intent,
                complete=complete,
                data_context=self.data_context,
                answers=history.answers,
            )
            self._prefix = system + anchors
            self._prefix_tokens = sum(message_tokens(m) for m in self._prefix)
            self._key = key
        notes = [self.composer.closing_note()] if closing_turn else []
        budget = self.budget_tokens - self._prefix_tokens - sum(message_tokens(m) for m in notes)
        budget = max(budget, 0)
        turns = history.wire(budget) if self.full_history else history.scoped_wire(scope, budget)
        return self._prefix + turns + notes
