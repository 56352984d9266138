"""The run state (`@state/workflow.md`) and the one guarded path every change to it takes.

Checks run in a fixed order — confirmation gate, ifMatchSha256, parse, defaults + schema,
transition against the graph, stepsCompleted monotonicity — and only then is the file replaced
atomically. Any rejection raises a CrewError and leaves the file byte-for-byte as it was.
Text from the model is parsed; a Draft the runtime rendered from a frontmatter dict is checked as
that dict (the text form, core.document.codec, renders it faithfully). The schema check skips parts
seen valid before (core.document.schema), never the check itself.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable

from ..base.atomic import atomic_write_bytes
from ..base.errors import CrewError
from ..base.frontmatter import FrontmatterError
from ..base.nesting import MAX_DEPTH, too_deep
from ..package.models import Graph
from ..schemas import validator
from .codec import Draft, Known, known, normalise, parse_text, plain, remember, render_draft, render_text
from .schema import PartwiseCheck

__all__ = [  # the text helpers are re-exported: callers know them as core.document.state's
    "STATE_ALIAS", "STATE_FILE", "Build", "Draft", "Gate", "StateDoc", "StateWrite", "allowed_next", "apply_update",
    "check_monotonic", "check_transition", "commit_state", "init_state_text", "is_complete", "load_doc", "normalise",
    "parse_text", "read_state", "record_artifacts", "render_draft", "render_text", "schema_errors", "steps_done",
]

STATE_ALIAS = "@state/workflow.md"
STATE_FILE = "workflow.md"
MAX_STATE_BYTES = 1_048_576  # a run state is a few KB; every prompt and write carries it
# Set by the runtime when the run is created; the model may read them but never change them.
RUNTIME_FIELDS = ("schemaVersion", "workflowType", "runId", "workflowRef", "activeAgentId")
_CARRIED_FIELDS = ("runId", "workflowRef", "activeAgentId")  # a whole-file write may leave these out


@dataclass(frozen=True)
class StateDoc:
    """The state file as found on disk. `frontmatter` is None when the file cannot be parsed."""

    data: bytes
    sha256: str
    frontmatter: dict[str, Any] | None  # normalised, a fresh copy
    raw: dict[str, Any] | None  # as written; shared with the parse cache, so never mutate it
    body: str


@dataclass(frozen=True)
class StateWrite:
    frontmatter: dict[str, Any]  # normalised, as now on disk
    sha256_before: str
    sha256_after: str


Gate = Callable[[dict[str, Any] | None], None]
# A build returns the new document text (parsed here), or a Draft the runtime rendered itself.
Build = Callable[[StateDoc | None], "str | Draft"]


# --- reading -------------------------------------------------------------------------------


def load_doc(state_dir: Path) -> StateDoc | None:
    """The state file as on disk; hashing and parsing are skipped when it holds the bytes last
    written or read here (what another process wrote is always parsed)."""
    path = os.path.join(state_dir, STATE_FILE)
    try:
        data = _read_bytes(path)
    except FileNotFoundError:
        return None
    hit = known(path, data)
    if hit is None:
        sha = hashlib.sha256(data).hexdigest()
        try:
            raw, body = parse_text(data.decode("utf-8"))
        except (FrontmatterError, UnicodeDecodeError):
            return StateDoc(data, sha, None, None, "")
        hit = Known(data, sha, raw, body)
        remember(path, hit)
    return StateDoc(data, hit.sha256, normalise(hit.frontmatter), hit.frontmatter, hit.body)


def _read_bytes(path: str) -> bytes:
    """The whole file in five system calls (Python's open() + read() makes nine)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        chunks = [os.read(fd, os.fstat(fd).st_size + 1)]
        while chunks[-1]:  # until an empty read: the file may have grown since fstat
            chunks.append(os.read(fd, 65536))
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_state(state_dir: Path) -> dict[str, Any]:
    """The run state's frontmatter with defaults filled; raises CrewError when missing or unreadable."""
    doc = load_doc(state_dir)
    if doc is None:
        raise CrewError("STATE_FILE_NOT_FOUND", f"The run state {STATE_ALIAS} does not exist.")
    if doc.frontmatter is None:
        parse_text(doc.data.decode("utf-8", errors="replace"))  # raises the readable parse error
        raise FrontmatterError(f"{STATE_ALIAS} is not valid UTF-8 text.")
    return doc.frontmatter


def is_complete(fm: dict[str, Any], graph: Graph) -> bool:
    """`variables.workflowStatus == "complete"` decides; an end node in stepsCompleted is the fallback."""
    variables = fm.get("variables") or {}
    if isinstance(variables, dict) and variables.get("workflowStatus") == "complete":
        return True
    node = graph.node(graph.effective_node_id(fm.get("currentNodeId")))
    return node is not None and node.type == "end" and node.id in (fm.get("stepsCompleted") or [])


def steps_done(fm: dict[str, Any], graph: Graph) -> int:
    done = set(fm.get("stepsCompleted") or [])
    return sum(1 for n in graph.nodes if n.id in done)


def allowed_next(graph: Graph, node_id: str) -> list[dict[str, Any]]:
    return [
        {"to": e.to, "label": e.label, "isDefault": e.isDefault, "conditionText": e.conditionText}
        for e in graph.outgoing(node_id)
    ]


# --- building a new state --------------------------------------------------------------------


def init_state_text(
    template: str,
    graph: Graph,
    *,
    run_id: str,
    agent_id: str,
    workflow_id: str,
    now: str,
    variables: dict[str, Any] | None = None,
) -> str:
    """The first `@state/workflow.md` of a run: the template with run fields set and progress reset
    (`variables` start empty, or as a calling workflow passes them)."""
    try:
        fm, body = parse_text(template)
    except FrontmatterError as exc:
        raise CrewError("STATE_INIT_FAILED", f"The workflow.md template cannot be used: {exc.message}") from None
    fm = {k: plain(v) for k, v in fm.items()}
    fm.update(runId=run_id, activeAgentId=agent_id, workflowRef=workflow_id, updatedAt=now)
    fm.update(
        currentNodeId=graph.entryNodeId,
        stepsCompleted=[],
        variables={k: plain(v) for k, v in (variables or {}).items()},
        decisionLog=[],
        artifacts=[],
    )
    errors = schema_errors(normalise(fm))
    if errors:
        listed = "; ".join(f"{e['path']}: {e['message']}" for e in errors[:5])
        raise CrewError("STATE_INIT_FAILED", f"The workflow.md template frontmatter is invalid: {listed}")
    return render_text(fm, body)


def apply_update(fm: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """`updateFrontmatter` semantics. A plain value (no `set`/`append`) means set.

    Returns a new mapping and never modifies `fm`: changed keys get new values, unchanged ones are
    shared with `fm` (commit_state normalises, i.e. copies, what it keeps).
    """
    out = dict(fm)
    for key, change in update.items():
        op, value = _operation(change)
        if key == "artifacts":
            value = [_project_relative(v) for v in value] if isinstance(value, list) else _project_relative(value)
        if op == "append":
            items = value if isinstance(value, list) else [value]
            current = out.get(key)
            if current is None:
                current = []
            if not isinstance(current, list):
                raise CrewError("E_INVALID_ARGS", f"Cannot append to '{key}': it is not a list.")
            if key == "decisionLog":
                out[key] = [*current, *items]
            else:
                out[key] = current + [i for n, i in enumerate(items) if i not in current and i not in items[:n]]
        elif key == "variables" and isinstance(value, dict):
            merged = out.get("variables") if isinstance(out.get("variables"), dict) else {}
            out["variables"] = {**merged, **value}  # shallow merge
        else:
            out[key] = value
    return out


def _project_relative(path: Any) -> Any:
    """State stores artifacts as `artifacts/x.md`; models often write `@project/artifacts/x.md`."""
    if not isinstance(path, str):
        return path
    text = path.strip().replace("\\", "/")
    while text.startswith("./"):
        text = text[2:]
    return text.removeprefix("@project/")


def _operation(change: Any) -> tuple[str, Any]:
    if isinstance(change, dict) and len(change) == 1:
        (op, value), = change.items()
        if op in ("set", "append"):
            return op, value
    return "set", change


# --- the guarded write -------------------------------------------------------------------------


def commit_state(
    state_dir: Path,
    graph: Graph,
    build: Build,
    *,
    if_match: str | None = None,
    gate: Gate | None = None,
    rewind: bool = False,
    returning: bool = False,
) -> StateWrite:
    """Validate the document `build` returns against the current state, then replace it atomically.

    `rewind` allows a non-edge move and dropping stepsCompleted entries (workflow_rewind only);
    `returning` lets the runtime move past a subworkflow node once its child completed.
    """
    prev = load_doc(state_dir)
    prev_fm = prev.frontmatter if prev else None
    if gate is not None:
        gate(prev_fm)
    before = prev.sha256 if prev else ""
    if if_match and if_match.strip().lower() != before:
        raise CrewError(
            "E_PRECONDITION_FAILED",
            f"{STATE_ALIAS} changed since you read it (ifMatchSha256 does not match). Read it again, then retry.",
            {"path": STATE_ALIAS, "sha256": before},
        )
    text, next_raw, body = _drafted(build(prev), prev_fm)
    _check_bounds(next_raw, text)
    next_fm = normalise(next_raw)
    _check_schema(next_fm)
    if prev_fm is not None:
        check_runtime_fields(prev_fm, next_fm)
    check_transition(prev_fm, next_fm, graph, rewind=rewind, returning=returning)
    if prev_fm is not None and not rewind:
        check_monotonic(prev_fm, next_fm)
    data = text.encode("utf-8")
    path = os.path.join(state_dir, STATE_FILE)
    atomic_write_bytes(path, data)
    after = hashlib.sha256(data).hexdigest()
    remember(path, Known(data, after, next_raw, body))  # the next read of these bytes needs no parse
    return StateWrite(next_fm, before, after)


def _drafted(built: str | Draft, prev_fm: dict[str, Any] | None) -> Draft:
    """The new document as (text, frontmatter as written, body): text from the model is parsed, and the
    runtime-owned fields it left out are carried over from the current state."""
    if isinstance(built, Draft):
        return built
    try:
        next_raw, body = parse_text(built)
    except FrontmatterError as exc:
        raise FrontmatterError(f"{STATE_ALIAS}: {exc.message}") from None
    text = built
    if prev_fm is not None:
        next_raw, text = _carry_runtime_fields(prev_fm, next_raw, text, body)
    return Draft(text, next_raw, body)


def _check_schema(frontmatter: dict[str, Any]) -> None:
    errors = schema_errors(frontmatter)
    if errors:
        listed = "; ".join(f"{e['path']}: {e['message']}" for e in errors[:3])
        more = f" (and {len(errors) - 3} more)" if len(errors) > 3 else ""
        raise CrewError(
            "E_SCHEMA_VALIDATION",
            f"{STATE_ALIAS} does not match the run-state schema: {listed}{more}.",
            {"errors": errors},
        )


def _carry_runtime_fields(
    prev: dict[str, Any], nxt: dict[str, Any], text: str, body: str
) -> tuple[dict[str, Any], str]:
    """A whole-file write that leaves out runtime fields keeps their values (the text is re-rendered)."""
    missing = {k: prev[k] for k in _CARRIED_FIELDS if k in prev and k not in nxt}
    if not missing:
        return nxt, text
    carried = {**nxt, **missing}
    return carried, render_text(carried, body)


def check_runtime_fields(prev: dict[str, Any], nxt: dict[str, Any]) -> None:
    """Both normalised. A runtime field the new state changes or leaves out is refused."""
    changed = [k for k in RUNTIME_FIELDS if k in prev and nxt.get(k) != prev[k]]
    if changed:
        keep = ", ".join(f"{k}: {json.dumps(prev[k])}" for k in changed)
        raise CrewError(
            "E_READ_ONLY_FIELD",
            f"{', '.join(changed)} in {STATE_ALIAS} belong to the runtime and cannot change. Keep {keep}.",
            {"fields": changed},
        )


def _check_bounds(fm: dict[str, Any], text: str) -> None:
    if len(text) > MAX_STATE_BYTES:
        raise CrewError(
            "E_STATE_TOO_LARGE",
            f"{STATE_ALIAS} would be larger than {MAX_STATE_BYTES // 1024} KB. Keep the state small: "
            "put long content in an artifact file and store its path in variables.",
        )
    if too_deep(fm):
        raise CrewError(
            "E_STATE_TOO_DEEP",
            f"Values in {STATE_ALIAS} are nested more than {MAX_DEPTH} levels deep. Use flatter values.",
        )


def schema_errors(fm: dict[str, Any]) -> list[dict[str, str]]:
    """Every error of the run-state schema; parts already seen valid are not validated again."""
    return [{"path": _json_path(e.absolute_path), "message": e.message} for e in _schema_check().errors(fm)]


@cache
def _schema_check() -> PartwiseCheck:
    return PartwiseCheck(validator("workflow-frontmatter"))


def check_transition(
    prev: dict[str, Any] | None,
    nxt: dict[str, Any],
    graph: Graph,
    *,
    rewind: bool = False,
    returning: bool = False,
) -> None:
    old = graph.effective_node_id(prev.get("currentNodeId")) if prev is not None else None
    new = graph.effective_node_id(nxt.get("currentNodeId"))
    if graph.node(new) is None:
        raise _transition_error(f"Unknown node '{new}': it is not in this workflow's graph.", old, new, graph)
    if old is None or new == old or rewind:
        return
    old_node = graph.node(old)
    if old_node is not None and old_node.type == "subworkflow" and not returning:
        raise CrewError(
            "E_SUBWORKFLOW_PENDING",
            f"Node '{old}' runs a sub-workflow; the runtime moves past it when that workflow completes. "
            "Leave currentNodeId as it is and end your turn.",
            {"from": old, "to": new},
        )
    if graph.has_edge(old, new):
        return
    raise _transition_error(f"Invalid transition: {old} → {new} (no such edge in the graph).", old, new, graph)


def check_monotonic(prev: dict[str, Any], nxt: dict[str, Any]) -> None:
    kept = set(nxt.get("stepsCompleted") or [])
    removed = [s for s in prev.get("stepsCompleted") or [] if s not in kept]
    if removed:
        raise CrewError(
            "E_INVALID_TRANSITION",
            f"stepsCompleted may only grow; this change removes {', '.join(removed)}. "
            "Keep the existing entries (use workflow_rewind to go back).",
            {"removed": removed},
        )


def _transition_error(message: str, old: str | None, new: str, graph: Graph) -> CrewError:
    options = allowed_next(graph, old) if old else []
    hint = ", ".join(f"{o['to']} ({o['label']})" for o in options) or "none"
    return CrewError(
        "E_INVALID_TRANSITION",
        f"{message} Allowed next from {old}: {hint}." if old else message,
        {"from": old, "to": new, "allowedNext": options},
    )


def record_artifacts(state_dir: Path, graph: Graph, paths: list[str]) -> dict[str, Any]:
    """Append project-relative artifact paths (deduplicated) through the guarded write."""

    def build(doc: StateDoc | None) -> Draft:
        if doc is None or doc.frontmatter is None:
            raise CrewError("E_INVALID_FRONTMATTER", f"{STATE_ALIAS} cannot be read, so artifacts cannot be recorded.")
        return render_draft(apply_update(doc.frontmatter, {"artifacts": {"append": paths}}), doc.body)

    return commit_state(state_dir, graph, build).frontmatter


def _json_path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(frontmatter)"
