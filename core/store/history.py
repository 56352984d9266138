"""Conversation history: a durable per-run message log, and fitting messages into a token budget.

The log is JSON lines, one message per append, handed to the OS before the next step, so a killed
process loses at most the LLM call in flight (lines are not fsynced: power-loss durability is out
of scope). Budgeting never splits an assistant tool-call message from its tool results
(providers reject orphans) and never drops the newest user input.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..base.atomic import AppendLog, atomic_write_text
from ..model.wire import MessageJSON
from ..base.wrappers import unwrap_user_input
from .runs_model import utc_now

Message = dict[str, Any]

DEFAULT_BUDGET_TOKENS = 100_000
POST_COMPLETION_WINDOW_TOKENS = 16_000  # post-completion chat keeps at most this much of its own turns
POST_COMPLETION_SCOPE = "(post-completion)"  # never a node id: ids have no parentheses
ANSWER_MAX_CHARS = 4_000
LARGE_RESULT_BYTES = 50_000
LARGE_RESULT_PREVIEW_CHARS = 500
SHRUNK_PREVIEW_CHARS = 300
_WIRE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "reasoning_content")
_LOG_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str)
INTERRUPTED_RESULT = json.dumps(
    {
        "ok": False,
        "error": {
            "code": "E_INTERRUPTED",
            "message": "The runtime stopped before this call's result was recorded. Check the state and the "
            "files before repeating it.",
        },
    }
)


def estimate_tokens(text: str | None) -> int:
    """ASCII characters count a quarter token each, any other character a whole one."""
    if not text:
        return 0
    if text.isascii():
        return (len(text) + 3) // 4
    ascii_chars = len(text.encode("ascii", "ignore"))
    return (ascii_chars + 3) // 4 + (len(text) - ascii_chars)


def message_tokens(message: Message) -> int:
    tokens = 4 + estimate_tokens(message.get("content"))
    for call in message.get("tool_calls") or ():
        function = call.get("function", {})
        tokens += 8 + estimate_tokens(function.get("name")) + estimate_tokens(function.get("arguments"))
    return tokens


def to_wire(message: Message) -> Message:
    """Only the fields chat-completions understands; our bookkeeping stays in the log."""
    wire = {k: message[k] for k in _WIRE_KEYS if k in message}
    if wire.get("role") == "assistant" and not wire.get("tool_calls"):
        wire.pop("tool_calls", None)
    return wire


# ---- budgeting -------------------------------------------------------------------


def _units(messages: Sequence[Message]) -> list[list[int]]:
    """Indexes grouped so that an assistant tool-call message and its results stay together."""
    units: list[list[int]] = []
    i = 0
    while i < len(messages):
        msg = messages[i]
        if msg.get("role") == "assistant" and msg.get("tool_calls"):
            group = [i]
            i += 1
            while i < len(messages) and messages[i].get("role") == "tool":
                group.append(i)
                i += 1
            units.append(group)
            continue
        if msg.get("role") != "tool":  # an orphan tool result would be rejected: leave it out
            units.append([i])
        i += 1
    return units


def _shrink(message: Message) -> Message:
    content = message.get("content") or ""
    if len(content) <= SHRUNK_PREVIEW_CHARS * 2:
        return message
    preview = content[:SHRUNK_PREVIEW_CHARS]
    return {
        **message,
        "content": f"{preview}\n[older tool result shortened to save context; call the tool again if you need it]",
    }


def fit_messages(
    messages: Sequence[Message], budget_tokens: int, tokens: Sequence[int] | None = None
) -> list[Message]:
    """Messages that fit in `budget_tokens`: shrink old tool results, then drop the oldest units."""
    counts = list(tokens) if tokens is not None else [message_tokens(m) for m in messages]
    units = _units(messages)
    total = sum(counts[i] for unit in units for i in unit)
    if total <= budget_tokens or not units:
        if sum(len(u) for u in units) == len(messages):
            return list(messages)
        return [messages[i] for unit in units for i in unit]

    last_user = max((n for n, unit in enumerate(units) if messages[unit[0]].get("role") == "user"), default=-1)
    protected = {len(units) - 1, last_user}
    out = list(messages)
    cost = list(counts)
    # 1) shorten old tool results, oldest first
    for n, unit in enumerate(units):
        if total <= budget_tokens:
            break
        if n in protected:
            continue
        for i in unit:
            if out[i].get("role") == "tool":
                shrunk = _shrink(out[i])
                if shrunk is not out[i]:
                    new_cost = message_tokens(shrunk)
                    total -= cost[i] - new_cost
                    out[i], cost[i] = shrunk, new_cost
    # 2) drop whole units, oldest first
    dropped: set[int] = set()
    for n, unit in enumerate(units):
        if total <= budget_tokens:
            break
        if n in protected:
            continue
        dropped.add(n)
        total -= sum(cost[i] for i in unit)
    kept = [out[i] for n, unit in enumerate(units) if n not in dropped for i in unit]
    if dropped:
        count = sum(len(units[n]) for n in dropped)
        note = (
            f"CONTEXT_NOTE\n{count} older messages were left out to fit the context budget. "
            "The run state and the files are authoritative; re-read them if you need details."
        )
        kept.insert(0, {"role": "user", "content": note})
    return kept


# ---- the durable log ----------------------------------------------------------


class History:
    """A run's conversation: in memory for composing, on disk (JSONL) for resuming."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.log = AppendLog(path) if path is not None else None  # a pump holds it open while it runs
        self.wire_json = MessageJSON()  # the JSON of what the last calls sent, for the next one
        self.entries: list[Message] = []  # stored form, with bookkeeping fields
        self._wire: list[Message] = []
        self._tokens: list[int] = []
        self._total_tokens = 0
        self._orphans = 0  # tool results not after their assistant call (only from a damaged log)
        self._in_round = False  # the last message was a tool call or one of its results
        self._next_id = 1
        self.answers: list[dict[str, str]] = []  # what the user said inside the workflow, with the node
        self.marks: list[Message] = []  # bookkeeping lines of the log that are not messages (held calls)

    @classmethod
    def load(cls, path: Path) -> History:
        """Read the log; skip a torn last line; close tool calls whose results never got written."""
        history = cls(path)
        if history._read(path):
            history._rewrite()
        history._close_dangling_calls()
        return history

    @classmethod
    def peek(cls, path: Path) -> History:
        """The log as it is, for looking only: nothing is repaired or written (another process may pump it)."""
        history = cls(None)
        history._read(path)
        return history

    def _read(self, path: Path) -> bool:
        """Add the log's messages; True when a torn line was skipped."""
        try:
            raw_lines = path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raw_lines = []
        torn = False
        for line in raw_lines:
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                torn = True
                continue
            if isinstance(entry, dict) and entry.get("role") in ("system", "user", "assistant", "tool"):
                self._add(entry)
            elif isinstance(entry, dict) and isinstance(entry.get("mark"), str):
                self.marks.append(entry)
        return torn

    def _add(self, entry: Message) -> None:
        tokens = int(entry.get("tokens") or message_tokens(entry))
        self.entries.append(entry)
        self._wire.append(to_wire(entry))
        self._tokens.append(tokens)
        self._total_tokens += tokens
        role = entry.get("role")
        if role == "tool":
            self._orphans += not self._in_round
        else:
            self._in_round = role == "assistant" and bool(entry.get("tool_calls"))
        self._next_id = len(self.entries) + 1
        if entry.get("part") == "user_input":
            node = _scope_of(entry)
            if node is not None and node != POST_COMPLETION_SCOPE:
                answer = unwrap_user_input(str(entry.get("content") or ""))
                if len(answer) > ANSWER_MAX_CHARS:
                    answer = answer[:ANSWER_MAX_CHARS] + "…"
                self.answers.append({"node": node, "answer": answer})

    def _rewrite(self) -> None:
        if self.path is not None:
            text = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in [*self.entries, *self.marks])
            atomic_write_text(self.path, text)

    def _close_dangling_calls(self) -> None:
        """Calls without a result get E_INTERRUPTED, except a held call and the calls after it."""
        held = self.held_call_ids()
        for index in range(len(self.entries) - 1, -1, -1):
            entry = self.entries[index]
            if entry.get("role") == "assistant" and entry.get("tool_calls"):
                later = self.entries[index + 1 :]
                answered = {e.get("tool_call_id") for e in later if e.get("role") == "tool"}
                for call in entry["tool_calls"]:
                    if call.get("id") in held:
                        break  # it waits for a decision; the calls after it run after that
                    if call.get("id") not in answered:
                        name = call.get("function", {}).get("name", "")
                        self.append(
                            {"role": "tool", "tool_call_id": call["id"], "content": INTERRUPTED_RESULT},
                            part="tool_result",
                            toolName=name,
                        )
                break

    def next_id(self) -> str:
        return f"m{self._next_id:05d}"

    def append_mark(self, mark: str, **data: Any) -> Message:
        """A bookkeeping line that is never sent to the model, e.g. `held` / `released` for a tool call
        whose result waits for someone's decision (the call stays open across restarts meanwhile)."""
        entry = {"mark": mark, "ts": utc_now(), **data}
        if self.log is not None:
            self.log.write((_LOG_JSON.encode(entry) + "\n").encode("utf-8"))
        self.marks.append(entry)
        return entry

    def held_call_ids(self) -> set[str]:
        """Tool calls marked `held` and neither `released` nor answered since."""
        released = {str(m.get("toolCallId")) for m in self.marks if m.get("mark") == "released"}
        held = {str(m.get("toolCallId")) for m in self.marks if m.get("mark") == "held"} - released
        if held:
            held -= {str(e.get("tool_call_id")) for e in self.entries if e.get("role") == "tool"}
        return held

    def append(self, message: Message, **meta: Any) -> Message:
        """Add one message and hand it to the OS (one appended line) before returning."""
        entry = {"id": self.next_id(), "ts": utc_now(), **message, **meta}
        entry["tokens"] = message_tokens(entry)
        if self.log is not None:
            self.log.write((_LOG_JSON.encode(entry) + "\n").encode("utf-8"))
        self._add(entry)
        return entry

    def wire(self, budget_tokens: int) -> list[Message]:
        """The messages to send; the whole history as is while it fits (no per-turn rescan)."""
        if self._total_tokens <= budget_tokens and not self._orphans:
            return list(self._wire)
        return fit_messages(self._wire, budget_tokens, self._tokens)

    def scoped_wire(self, scope: str, budget_tokens: int) -> list[Message]:
        """Only the trailing turns of `scope` (a node id, or POST_COMPLETION_SCOPE after completion).

        A finished node's turns leave the prompt: what later nodes need is in the state summary
        (answers, decisions, artifacts, variables) and the files. The log itself keeps everything.
        Messages without a scope (runtime notes, tool results) belong to the turn they follow.
        """
        start = len(self.entries)
        head, boundary = start, -1
        for index in range(len(self.entries) - 1, -1, -1):
            entry = self.entries[index]
            if entry.get("role") == "tool":
                continue
            owner = _scope_of(entry)
            if owner is not None and owner != scope:
                boundary = index
                break
            head = index
        start = head
        while start < len(self.entries) and self.entries[start].get("role") == "tool":
            start += 1  # results whose call was left out would be rejected
        if scope == POST_COMPLETION_SCOPE:
            budget_tokens = min(budget_tokens, POST_COMPLETION_WINDOW_TOKENS)
        carried, carried_tokens = self._carried_reads(boundary, scope)
        window, tokens = carried + self._wire[start:], carried_tokens + self._tokens[start:]
        if sum(tokens) <= budget_tokens and not self._orphans:
            return window
        return fit_messages(window, budget_tokens, tokens)

    def _carried_reads(self, boundary: int, scope: str) -> tuple[list[Message], list[int]]:
        """The calls of the reply that finished the last node which it issued after moving to `scope`.

        A model that pipelines reads the next node's state and step file in the same reply that
        moves the state; those results belong to the new node, so they stay (with a copy of their
        assistant message cut down to just those calls, as providers reject orphan results).
        Decided from the log alone (each result's `scope`), so a resumed run sends the same prompt.
        """
        if boundary < 0:
            return [], []
        reply = self.entries[boundary]
        if reply.get("role") != "assistant" or not reply.get("tool_calls"):
            return [], []
        results: list[int] = []
        for index in range(boundary + 1, len(self.entries)):
            entry = self.entries[index]
            if entry.get("role") != "tool":
                break
            if entry.get("scope") == scope:
                results.append(index)
        if not results:
            return [], []
        ids = {self.entries[i].get("tool_call_id") for i in results}
        calls = [c for c in reply["tool_calls"] if c.get("id") in ids]
        head: Message = {"role": "assistant", "content": None, "tool_calls": calls}
        return [head] + [self._wire[i] for i in results], [message_tokens(head)] + [self._tokens[i] for i in results]

    def __len__(self) -> int:
        return len(self.entries)

    def pending_question(self) -> str | None:
        """What the model last asked the user: a ui_ask_user message, or its closing text, or the title
        of the call that waits for approval."""
        held = self.held_call_ids()
        for mark in reversed(self.marks if held else ()):
            if mark.get("mark") == "held" and mark.get("toolCallId") in held:
                widget = mark.get("widget")
                title = widget.get("title") if isinstance(widget, dict) else None
                return str(title) if title else None
        for entry in reversed(self.entries):
            if entry.get("role") != "assistant":
                continue
            for call in reversed(entry.get("tool_calls") or []):
                function = call.get("function") or {}
                if function.get("name") in ("ui_ask_user", "ui.ask_user"):
                    try:
                        arguments = json.loads(function.get("arguments") or "{}")
                    except ValueError:
                        return None
                    message = arguments.get("message") if isinstance(arguments, dict) else None
                    return str(message) if message else None
            if entry.get("tool_calls"):
                return None
            return str(entry["content"]) if entry.get("content") else None
        return None

class HistoryCache:
    """The conversations of recently pumped runs, so a pump does not re-read a log it wrote itself.

    A kept history is reused only while its log's (inode, size, mtime) are exactly as they were when
    the pump that wrote it ended; another writer, or a pump that died with an exception, means the
    log is read again. Either way tool calls left without a result are closed, as History.load does.
    """

    def __init__(self, size: int = 32) -> None:
        self.size = size
        self._kept: dict[Path, tuple[tuple[int, int, int] | None, History]] = {}

    def open(self, path: Path) -> History:
        kept = self._kept.pop(path, None)  # a running pump owns its history; it is kept again at the end
        if kept is not None and kept[0] is not None and kept[0] == _signature(path):
            kept[1]._close_dangling_calls()
            return kept[1]
        return History.load(path)

    def keep(self, history: History) -> None:
        if history.path is None:
            return
        self._kept[history.path] = (_signature(history.path), history)
        while len(self._kept) > self.size:
            del self._kept[next(iter(self._kept))]


def _scope_of(entry: Message) -> str | None:
    """The node (or POST_COMPLETION_SCOPE) a message was sent in; older logs only have nodeId."""
    scope = entry.get("scope", entry.get("nodeId"))
    return str(scope) if scope else None


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def offload_large_result(
    content: str, *, message_id: str, real_dir: Path | None, alias_dir: str | None, limit: int = LARGE_RESULT_BYTES
) -> str:
    """Tool output over `limit` bytes is kept in full in a file; history gets a preview + pointer."""
    if len(content) <= limit // 4 or len(content.encode("utf-8")) <= limit:
        return content
    preview = content[:LARGE_RESULT_PREVIEW_CHARS]
    if real_dir is None or alias_dir is None:
        return f"{preview}\n\n[Output truncated: {len(content)} characters in total; narrow the request.]"
    real_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(real_dir / f"{message_id}.json", content)
    return f"{preview}\n\n[Full output: {alias_dir}/{message_id}.json (read windows with fs_read startLine/endLine)]"
