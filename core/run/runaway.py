"""Runaway protection for a pump: turns without progress, one failing call on repeat,
and a turn that ends asking nothing while the state stands still (the model slipped: nudged once)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from .engine_model import EngineSettings
from ..package.models import Graph
from ..prompts.composer import render
from ..tools.base import ToolOutcome
from ..tools.registry import wire_name


@dataclass
class RunawayGuard:
    settings: EngineSettings
    turns_since_progress: int = 0
    fingerprint: str | None = None
    repeats: int = 0
    tool: str = ""
    error: dict[str, Any] = field(default_factory=dict)
    nudged: bool = False
    start: tuple[str, int] | None = None  # (node, steps completed) when the pump began
    slip_nudged: bool = False

    def begin(self, graph: Graph, fm: dict[str, Any]) -> RunawayGuard:
        self.start = _progress(graph, fm)
        return self

    def runaway(self, llm_calls: int) -> str | None:
        """Why the pump must stop before another LLM call, or None."""
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

    def slip_note(self, text: str | None, graph: Graph, fm: dict[str, Any]) -> str | None:
        """The runtime note for the first turn that ends without a question while the state is where the
        pump found it (the model said "Moving on." without moving the run); a second slip goes to the user."""
        progress = _progress(graph, fm)
        if self.slip_nudged or progress != self.start or looks_like_question(text):
            return None
        self.slip_nudged = True
        node = progress[0]
        allowed = ", ".join(f'"{e.to}"' for e in graph.outgoing(node)) or "none: the workflow ends here"
        return render("stall-nudge", node_id=node, allowed=allowed)

    def error_parts(self) -> tuple[str, str]:
        return str(self.error.get("code", "")), str(self.error.get("message", ""))


def _fingerprint(name: str, arguments: str) -> str:
    try:
        args = json.loads(arguments) if arguments.strip() else {}
        stable = json.dumps(args, sort_keys=True, separators=(",", ":"))
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        stable = arguments.strip()
    return f"{wire_name(name)}:{stable}"


# A question mark, or the usual ways of asking without one ("Please confirm the key.", "Let me know…").
_ASKING = re.compile(
    r"\?|\b(?:let me know|tell me|reply with|your (?:answer|choice|input|reply|decision)|waiting for your"
    r"|please (?:provide|confirm|choose|select|pick|reply|answer|tell|share|send|paste|give|enter|specify|review))\b",
    re.IGNORECASE,
)


def looks_like_question(text: str | None) -> bool:
    """Whether a reply asks the user something (so the run rightly waits for them)."""
    return bool(text and _ASKING.search(text))


def _progress(graph: Graph, fm: dict[str, Any]) -> tuple[str, int]:
    return graph.effective_node_id(fm.get("currentNodeId")), len(fm.get("stepsCompleted") or ())
