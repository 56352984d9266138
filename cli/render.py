"""Terminal rendering of engine events and run status, and widgets answered by typing.

Used by `crewagent run` and `crewagent chat`; output goes through a `write` callable so tests
and other commands can capture it.
"""

from __future__ import annotations

import getpass

import json
import sys
from collections.abc import Callable
from typing import Any

from crewagent.core.api.errors import CrewError
from crewagent.core.api.events import RunPhase, engine_events
from crewagent.core.api.packages import Package
from crewagent.core.api.runs import RunSnapshot
from crewagent.core.api.sessions import FormAnswer, answers

Write = Callable[[str], None]
ReadLine = Callable[[str], str | None]


def stdout_write(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def stdout_pieces(text: str) -> None:
    """Assistant text as it streams: no newline, shown at once."""
    sys.stdout.write(text)
    sys.stdout.flush()


CUT_OFF_MARK = "(connection lost, retrying)"


class LiveText:
    """Streams one reply at a time to a terminal; remembers whether the full text was already shown."""

    def __init__(self, pieces: Write | None) -> None:
        self.pieces = pieces
        self.shown: str | None = None  # the text streamed so far (None: nothing is streaming)
        self._key: tuple[str | None, int] | None = None

    def piece(self, key: tuple[str | None, int], heading: str, text: str) -> None:
        if self.pieces is None:
            return
        if self._key != key:
            self.end()
            self._key, self.shown = key, ""
            self.pieces(f"\n{heading}:\n")
        if not self.shown:
            text = text.lstrip()
        if text:
            self.pieces(text)
            self.shown = (self.shown or "") + text

    def restart(self) -> None:
        """The reply being streamed was cut off and is asked for again: mark it, the new one starts anew."""
        if self.shown is not None and self.pieces is not None:
            self.pieces(f"\n{CUT_OFF_MARK}\n")
        self.shown, self._key = None, None

    def streamed(self, text: str) -> bool:
        """Close the live reply; True when it already showed `text` (so it is not printed again)."""
        shown = self.shown
        self.end()
        return shown is not None and shown.strip() == text.strip()

    def end(self) -> None:
        if self.shown is not None and self.pieces is not None:
            self.pieces("\n")
        self.shown, self._key = None, None


def stdin_read_line(prompt: str) -> str | None:
    """One line from stdin without the newline; None at end of input."""
    sys.stdout.write(prompt)
    sys.stdout.flush()
    line = sys.stdin.readline()
    if not line:
        return None
    return line.rstrip("\r\n")


class EventPrinter:
    """Prints each node as it starts, each artifact as it is written, and what the model says.
    A sub-workflow's nodes are shown under the caller's name: `Plan a Feature › Party Mode: Voices`."""

    def __init__(
        self,
        package: Package | None = None,
        write: Write = stdout_write,
        *,
        verbose: bool = False,
        steps_done: int | None = None,
        pieces: Write | None = None,
    ) -> None:
        """`pieces` shows streamed text as it comes (default: on a real terminal, when writing to stdout)."""
        self.package = package
        self.write = write
        self.live = LiveText(pieces if pieces is not None else (stdout_pieces if write is stdout_write else None))
        self.verbose = verbose
        self._steps_done: dict[str | None, int | None] = {None: steps_done}  # known progress per run
        self._names: dict[str, str] = {}  # run id -> "Caller › Child" for runs nested in the printed one

    def agent_name(self, agent_id: str | None) -> str:
        agent = self.package.agent(agent_id) if self.package and agent_id else None
        return agent.display_name if agent else (agent_id or "assistant")

    def workflow_name(self, workflow_id: str | None) -> str:
        workflow = self.package.workflow(workflow_id) if self.package and workflow_id else None
        return workflow.display_name if workflow else (workflow_id or "workflow")

    async def __call__(self, event: engine_events.EngineEvent) -> None:
        self.show(event)

    def show(self, event: engine_events.EngineEvent) -> None:
        if isinstance(event, engine_events.AssistantTextDelta):
            if event.restart:
                self.live.restart()
                return
            self.live.piece((event.run_id, event.turn), self.agent_name(event.agent_id), event.text)
            return
        if isinstance(event, engine_events.AssistantText):
            if not self.live.streamed(event.text):
                self.write(f"\n{self.agent_name(event.agent_id)}:\n{event.text.strip()}")
            return
        self.live.end()
        nested = self._names.get(event.run_id) if event.parent_run_id else None
        if isinstance(event, engine_events.SubworkflowStarted):
            caller = self._names.get(event.run_id) or self.workflow_name(event.caller_workflow_id)
            self._names[event.child_run_id] = f"{caller} › {event.workflow_name}"
            verb = "continues" if event.resumed else "starts"
            self.write(f"\n↳ {self._names[event.child_run_id]} {verb} (sub-workflow run {event.child_run_id})")
        elif isinstance(event, engine_events.SubworkflowReturned):
            name = self._names.pop(event.child_run_id, event.workflow_name)
            outputs = ", ".join(f"{k}={v}" for k, v in event.variables.items()) or "no variables"
            self.write(f"↲ {name} done: {outputs}")
        elif isinstance(event, engine_events.NodeStarted):
            where = f"{nested}: " if nested else ""
            self.write(f"\n▶ {where}{event.title} [{event.node_id}] — {self.agent_name(event.agent_id)}")
        elif isinstance(event, engine_events.ArtifactWritten):
            self.write(f"  ✎ wrote {event.path}")
        elif isinstance(event, engine_events.StateUpdated):
            key = event.run_id if event.parent_run_id else None
            done, before = len(event.steps_completed), self._steps_done.get(key, 0)
            if before is not None and done > before:
                progress = engine_events.progress_text(done, event.steps_total, event.steps_not_taken, unit="")
                self.write(f"  ✓ {event.steps_completed[-1]} done ({progress})")
            self._steps_done[key] = done
        elif isinstance(event, engine_events.ToolExecuted):
            if not event.ok:
                self.write(f"  ! {event.summary}")
            elif self.verbose:
                self.write(f"  · {event.summary}")
        elif isinstance(event, engine_events.CommandProgress):
            if event.running and event.elapsed_ms == 0:
                self.write(f"  $ {event.command}")
            elif not event.running:
                ended = f"exit {event.exit_code}" if event.killed is None else f"stopped ({event.killed})"
                self.write(f"    → {ended} after {event.elapsed_ms / 1000:.1f} s")
        elif isinstance(event, engine_events.LLMRetrying):
            self.write(f"  … {engine_events.retry_note(event)}")
        elif isinstance(event, engine_events.PhaseChanged) and event.parent_run_id is None:  # the caller reports for both
            if event.phase is RunPhase.FAILED:
                self.write(f"\n✖ Run failed: {event.reason or event.error_code}")
            elif event.phase is RunPhase.WAITING_USER and event.error_code:
                self.write(f"\n⚠ {event.reason}")


def agents_line(snapshot: RunSnapshot) -> str:
    """The run's own agent, and the current step's when another agent runs it (a persona switch)."""
    started = snapshot.run_agent_name or snapshot.agent_name
    if snapshot.run_agent_id is None or snapshot.run_agent_id == snapshot.agent_id or not snapshot.current_node_id:
        return started
    return f"{started}; this step: {snapshot.agent_name}"


def render_snapshot(snapshot: RunSnapshot) -> list[str]:
    phase = snapshot.phase.value + (" (paused)" if snapshot.paused else "")
    lines = [
        f"Run:       {snapshot.run_id}",
        f"Workflow:  {snapshot.workflow_name} ({snapshot.workflow_id})",
        f"Phase:     {phase}",
        f"Agent:     {agents_line(snapshot)}",
        f"Progress:  {snapshot.progress()}",
    ]
    if snapshot.current_node_id:
        lines.append(f"Node:      {snapshot.current_node_title} [{snapshot.current_node_id}]")
    chain = snapshot.chain()
    if len(chain) > 1:
        working = chain[-1]
        names = " › ".join(s.workflow_name for s in chain)
        node = f": {working.current_node_title} [{working.current_node_id}]" if working.current_node_id else ""
        lines.append(f"Nested:    {names}{node} ({working.progress()}, run {working.run_id})")
    if snapshot.error:
        lines.append(f"Error:     {snapshot.error.code}: {snapshot.error.message}")
    if snapshot.usage.llm_calls:
        lines.append(f"Usage:     {snapshot.usage.line()}")
    lines.append("Artifacts: " + ("none" if not snapshot.artifacts else ""))
    lines += [f"  - {a}" for a in snapshot.artifacts]
    return lines


# ---- widgets ---------------------------------------------------------------------------


class InputClosed(Exception):
    """stdin ended while a widget was waiting for an answer."""


def _ask(read_line: ReadLine, prompt: str) -> str:
    line = read_line(prompt)
    if line is None:
        raise InputClosed
    return line.strip()


def _pick(read_line: ReadLine, write: Write, labels: list[str], *, multi: bool) -> list[int]:
    for n, label in enumerate(labels, 1):
        write(f"  {n}. {label}")
    hint = "numbers separated by commas" if multi else "a number"
    while True:
        raw = _ask(read_line, f"Choose {hint}: ")
        try:
            picked = [int(p) for p in raw.replace(" ", "").split(",") if p]
        except ValueError:
            picked = []
        if picked and all(1 <= p <= len(labels) for p in picked) and (multi or len(picked) == 1):
            return [p - 1 for p in picked]
        write(f"Please type {hint} between 1 and {len(labels)}.")


def _yes_no(read_line: ReadLine, write: Write, prompt: str) -> bool:
    while True:
        raw = _ask(read_line, f"{prompt} [y/n]: ").lower()
        if raw in ("y", "yes"):
            return True
        if raw in ("n", "no"):
            return False
        write("Please answer y or n.")


def _approve(read_line: ReadLine, write: Write, allow_for_run: str | None) -> str:
    """y/N (y/N/a when the prefix may be allowed for the run): anything else, an empty line too, is no."""
    options = "y/N/a" if allow_for_run else "y/N"
    if allow_for_run:
        write(f"  (a: approve, and allow `{allow_for_run}` for the rest of this run)")
    raw = _ask(read_line, f"Approve this call? [{options}]: ").strip().lower()
    if raw in ("a", "all", "always") and allow_for_run:
        return "allow_for_run"
    if raw not in ("y", "yes"):
        write("Not approved: the call is not made.")
        return "deny"
    return "approve"


def terminal_user() -> str:
    """Who answered in the terminal, for the audit log."""
    try:
        return f"{getpass.getuser()} (terminal)"
    except (OSError, KeyError):
        return "terminal user"


def _coerce(raw: str, spec: dict[str, Any]) -> Any:
    kind = spec.get("type")
    if "enum" in spec:
        if raw not in [str(v) for v in spec["enum"]]:
            raise ValueError("choose one of: " + ", ".join(str(v) for v in spec["enum"]))
        return next(v for v in spec["enum"] if str(v) == raw)
    if kind == "integer":
        return int(raw)
    if kind == "number":
        return float(raw)
    if kind == "boolean":
        if raw.lower() in ("y", "yes", "true"):
            return True
        if raw.lower() in ("n", "no", "false"):
            return False
        raise ValueError("answer yes or no")
    return raw


def _form(read_line: ReadLine, write: Write, schema: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    write("Answer field by field (or paste one JSON object on the first line).")
    value: dict[str, Any] = {}
    for n, (name, spec) in enumerate(props.items()):
        spec = spec if isinstance(spec, dict) else {}
        label = spec.get("title") or name
        extra = f" ({', '.join(str(v) for v in spec['enum'])})" if "enum" in spec else ""
        optional = "" if name in required else " [optional]"
        while True:
            raw = _ask(read_line, f"{label}{extra}{optional}: ")
            if n == 0 and raw.startswith("{"):
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    write("That is not valid JSON; answer the fields one by one.")
                    continue
                if isinstance(parsed, dict):
                    return parsed
            if not raw:
                if name in required:
                    write("This field is required.")
                    continue
                break
            try:
                value[name] = _coerce(raw, spec)
                break
            except ValueError as exc:
                write(f"Invalid value: {exc}.")
    return value


def ask_answer(
    widget: dict[str, Any], read_line: ReadLine = stdin_read_line, write: Write = stdout_write
) -> FormAnswer:
    """Ask a question on the terminal until the answer fits it; returns the typed answer.

    Raises InputClosed if stdin ends before an answer.
    """
    while True:
        value = ask_widget(widget, read_line, write)
        try:
            return answers.checked_answer(widget, value)
        except CrewError as exc:
            write(exc.message)


def ask_widget(widget: dict[str, Any], read_line: ReadLine = stdin_read_line, write: Write = stdout_write) -> Any:
    """Ask a ui_ask_user widget on the terminal; returns the value its answer carries (see ask_answer).

    Raises InputClosed if stdin ends before an answer.
    """
    kind = widget.get("type")
    write(f"\n? {widget.get('message', '').strip()}")
    if kind == "confirmation":
        return {"confirmed": _yes_no(read_line, write, "Confirm")}
    if kind in ("tool_approval", "mcp_approval"):
        return {"decision": _approve(read_line, write, widget.get("allowForRun")), "by": terminal_user()}
    if kind == "selection":
        options = widget.get("options") or []
        labels = [o.get("label") or o.get("value") for o in options]
        labels = [f"{lab} — {o['description']}" if o.get("description") else lab for lab, o in zip(labels, options)]
        picked = _pick(read_line, write, labels, multi=bool(widget.get("multi")))
        return [options[i].get("value") for i in picked]
    if kind == "action_selection":
        actions = widget.get("actions") or []
        picked = _pick(read_line, write, [a.get("label") or a.get("id") for a in actions], multi=False)
        return actions[picked[0]].get("id")
    if kind == "form":
        return _form(read_line, write, widget.get("schema") or {})
    if kind == "plan_review":
        write(str(widget.get("planContent") or ""))
        if _yes_no(read_line, write, "Approve this plan"):
            return {"decision": "approve"}
        return {"decision": "request_changes", "feedback": _ask(read_line, "What should change? ")}
    if kind == "feedback":
        return {
            str(item.get("id")): _ask(read_line, f"{item.get('content', '')}\n  your comment: ")
            for item in widget.get("items") or []
        }
    return _ask(read_line, "> ")
