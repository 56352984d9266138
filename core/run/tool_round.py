"""Running the model's tool calls and recording what each one did.

Every result is redacted (no server path reaches the model), moved to @state/logs/tool-results
with a pointer when large, appended to the conversation log before the next call runs, and
reported to the surface as ToolExecuted / ArtifactWritten events.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from functools import lru_cache
from pathlib import Path

from ..base.events import ArtifactWritten, EngineEvent, ToolExecuted
from ..store.history import History, offload_large_result
from ..model.client import ToolCall
from ..tools.base import Mounts, ToolContext, ToolOutcome
from ..tools.registry import ToolHost, wire_name

TOOL_RESULTS_ALIAS = "@state/logs/tool-results"
Emit = Callable[[EngineEvent], Awaitable[None]]


class ToolRecorder:
    """Executes one call at a time for a pump and records it; never raises for a failing tool."""

    def __init__(
        self,
        tools: ToolHost,
        history: History,
        emit: Emit,
        *,
        run_id: str,
        mounts: Mounts,
        home: Path,
        results_dir: Path,
        large_result_bytes: int,
    ) -> None:
        self.tools, self.history, self.emit = tools, history, emit
        self.run_id = run_id
        self.redactions = redactions(mounts.state, mounts.project, mounts.pkg, home)
        self.results_dir = results_dir
        self.large_result_bytes = large_result_bytes

    async def run(self, call: ToolCall, ctx: ToolContext, *, scope: str | None = None) -> ToolOutcome:
        """`scope`: the node active when the call was issued; a result issued after the reply moved
        the state to the next node belongs to that node and stays in its prompt (History.scoped_wire).
        A call that waits for approval (`outcome.approval`) ran nothing and is not recorded: the pump holds it."""
        if ctx.progress is None:
            ctx.progress = self.emit  # long calls (shell_run) report progress on the run's surface
        outcome = await self.tools.execute(call.name, call.arguments, ctx, call_id=call.id)
        if outcome.approval is None:
            await self.record(call, outcome, scope)
        return outcome

    async def record(self, call: ToolCall, outcome: ToolOutcome, scope: str | None) -> None:
        """The call's tool message (redacted, large results offloaded) and its events."""
        text = outcome.result_json
        if text is None:
            text = json.dumps(outcome.result, ensure_ascii=False, default=str)
        text = redact(text, self.redactions)
        text = offload_large_result(
            text,
            message_id=self.history.next_id(),
            real_dir=self.results_dir,
            alias_dir=TOOL_RESULTS_ALIAS,
            limit=self.large_result_bytes,
        )
        wire = wire_name(call.name)
        meta = {"scope": scope} if scope is not None else {}
        self.history.append(
            {"role": "tool", "tool_call_id": call.id, "content": text}, part="tool_result", toolName=wire, **meta
        )
        error = outcome.result.get("error") if not outcome.ok else None
        await self.emit(
            ToolExecuted(
                run_id=self.run_id,
                tool=wire,
                ok=outcome.ok,
                summary=summary(wire, call.arguments, outcome),
                error_code=(error or {}).get("code") if isinstance(error, dict) else None,
            )
        )
        for path in artifacts_touched(outcome):
            await self.emit(ArtifactWritten(run_id=self.run_id, path=path))


def artifacts_touched(outcome: ToolOutcome) -> list[str]:
    """Project-relative artifacts the call created or rewrote, each once."""
    written = list(outcome.artifacts_created)
    for alias in outcome.files_written:
        rel = alias.removeprefix("@project/")
        if rel.startswith("artifacts/") and rel not in written:
            written.append(rel)
    return written


def summary(tool: str, arguments: str, outcome: ToolOutcome) -> str:
    """One line, alias paths only: `fs_write @project/artifacts/x.md` or `... — E_SANDBOX_VIOLATION`."""
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        args = {}
    target = ""
    if isinstance(args, dict):
        for key in ("path", "targetNodeId", "widgetId", "command"):
            if isinstance(args.get(key), str):
                target = args[key]
                break
    line = f"{tool} {target}".strip()
    if not outcome.ok:
        error = outcome.result.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        line += f" — {code or 'failed'}"
    return line[:200]


def redactions(state: Path | None, project: Path, pkg: Path, home: Path) -> tuple[tuple[str, str], ...]:
    """Real roots → aliases, longest first, so no server path reaches the model (resolved once per run)."""
    pairs = [(spelling, "@state") for spelling in _spellings(state)] if state is not None else []
    for root, alias in ((project, "@project"), (pkg, "@pkg"), (home, "<runtime-home>")):
        pairs.extend((spelling, alias) for spelling in _lasting_spellings(root))
    return tuple(sorted(pairs, key=lambda p: len(p[0]), reverse=True))


def _spellings(root: Path) -> frozenset[str]:
    """A root as given and as resolved."""
    return frozenset({str(root), str(Path(root).resolve())})


# The project, the package and the home are the same for every run of a process: resolving them (a stat per
# folder on the way) at each run's start was a noticeable part of it. A run's state folder is new each time.
_lasting_spellings = lru_cache(maxsize=256)(_spellings)


def redact(text: str, pairs: Sequence[tuple[str, str]]) -> str:
    for real, alias in pairs:
        if real in text:
            text = text.replace(real, alias)
    return text
