"""BMAD's help catalog (`module-help.csv`) → the package's `next-steps.json`: what follows each workflow.

Each BMAD generation says "what comes next" with its own columns, and each is read as it is:
- `phase` + `sequence` (v6.0–v6.2): the rows after a row in its module and phase, up to the first
  required one (when none is required, up to the first one its description names by code); a
  description's "back to DS" is a step back (the review asked for changes), "next CS" one forward;
- `after` + `before` (between): `before: X` puts X after this row, `after: X` this row after X;
- `preceded-by` + `followed-by` (v6.11 on): the same two relations under their later names.
A reference is a skill name, optionally `:action`; several are separated by `;`, `|`, `,` or spaces.
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
import re
from dataclasses import dataclass, field

from crewagent.core.package.next_steps import MAX_NEXT, NEXT_STEPS_FILE, NextStep, NextSteps, StepLinks

from .agents import ImportedAgent
from .step_workflows import WorkflowPlan

_REFS = re.compile(r"[;|,\s]+")
_BACK = re.compile(r"\bback to ([A-Z]{2,4})\b")
_FORWARD = re.compile(r"\bnext ([A-Z]{2,4})\b")


@dataclass
class HelpRow:
    module: str
    workflow: str  # the package's workflow id
    label: str
    code: str
    skill: str  # the BMAD name other rows refer to it by
    action: str
    agent: str | None
    required: bool
    description: str
    phase: str
    sequence: float | None
    raw: dict[str, str] = field(default_factory=dict)


def next_steps_file(catalog: str, source_path: str, plans: list[WorkflowPlan],
                    agents: list[ImportedAgent]) -> dict[str, str]:
    """`{"next-steps.json": ...}` from the merged help catalog, or nothing when it links no two workflows."""
    table = list(csv.DictReader(io.StringIO(catalog)))
    header = set(table[0]) if table else set()
    rows = [row for raw in table if (row := _row(raw, plans, agents)) is not None]
    if "sequence" in header:
        edges = _by_sequence(rows)
    else:
        later, earlier = ("followed-by", "preceded-by") if "followed-by" in header else ("before", "after")
        edges = _by_reference(rows, later, earlier)
    steps = _links(rows, edges)
    if not steps:
        return {}
    doc = NextSteps(source=source_path, steps=steps)
    return {NEXT_STEPS_FILE: json.dumps(doc.model_dump(exclude_defaults=False), indent=2, ensure_ascii=False) + "\n"}


def _row(raw: dict[str, str], plans: list[WorkflowPlan], agents: list[ImportedAgent]) -> HelpRow | None:
    """A catalog row naming one of the imported workflows (other rows, like `_meta`, are skipped)."""
    cell = {k.strip(): (v or "").strip() for k, v in raw.items() if isinstance(k, str)}
    target = cell.get("skill") or cell.get("workflow-file", "")
    plan = _plan_for(target, plans)
    if plan is None:
        return None
    skill = target.removeprefix("skill:") if not target.endswith((".yaml", ".md")) else _folder(target)
    sequence = cell.get("sequence", "")
    agent_ids = {a.doc["id"] for a in agents}
    named = cell.get("agent") or None
    return HelpRow(
        module=cell.get("module", ""), workflow=plan.id,
        label=(cell.get("name") or cell.get("display-name") or plan.display_name or plan.id)[:75],
        code=cell.get("code") or cell.get("menu-code", ""), skill=skill, action=cell.get("action", ""),
        agent=named if named in agent_ids else _menu_owner(plan, agents),
        required=cell.get("required", "").lower() == "true", description=cell.get("description", ""),
        phase=cell.get("phase", ""), sequence=float(sequence) if _number(sequence) else None, raw=cell,
    )


def _plan_for(target: str, plans: list[WorkflowPlan]) -> WorkflowPlan | None:
    """The workflow a catalog row runs: a `_bmad/` path (older catalogs) or a skill name (later ones)."""
    if not target:
        return None
    if target.endswith((".yaml", ".md")):
        rel = target.removeprefix("{project-root}/").removeprefix("_bmad/")
        found = next((p for p in plans if p.entry == rel), None)
        return found or _plan_for(_folder(target), plans)
    name = target.removeprefix("skill:")
    by_folder = next((p for p in plans if _folder(p.entry) == name), None)
    return by_folder or next((p for p in plans if p.id == name.removeprefix("bmad-")), None)


def _folder(rel: str) -> str:
    return posixpath.basename(posixpath.dirname(rel))


def _menu_owner(plan: WorkflowPlan, agents: list[ImportedAgent]) -> str | None:
    for agent in agents:
        for item in agent.doc.get("menu", []):
            if (item.get("workflow") or item.get("exec")) in (plan.id, plan.template_path):
                return str(agent.doc["id"])
    return None


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


Edge = tuple[HelpRow, HelpRow, bool]  # (from, to, back)


def _by_sequence(rows: list[HelpRow]) -> list[Edge]:
    edges: list[Edge] = []
    by_code = {(r.module, r.code): r for r in rows if r.code}
    for row in rows:
        named = {code for code in re.findall(r"\b[A-Z]{2,4}\b", row.description)}
        if row.sequence is not None:
            later = sorted((r for r in rows if r.module == row.module and r.phase == row.phase
                            and r.sequence is not None and r.sequence > row.sequence), key=lambda r: r.sequence or 0)
            stop = next((i for i, r in enumerate(later) if r.required), None)
            if stop is None:
                stop = next((i for i, r in enumerate(later) if r.code in named), 0)
            edges += [(row, r, False) for r in later[: stop + 1]]
        for pattern, back in ((_BACK, True), (_FORWARD, False)):
            for code in pattern.findall(row.description):
                if (row.module, code) in by_code:
                    edges.append((row, by_code[(row.module, code)], back))
    return edges


def _by_reference(rows: list[HelpRow], later: str, earlier: str) -> list[Edge]:
    edges: list[Edge] = []
    for row in rows:
        for target in _referenced(rows, row.raw.get(later, "")):
            edges.append((row, target, False))
        for source in _referenced(rows, row.raw.get(earlier, "")):
            edges.append((source, row, False))
    return edges


def _referenced(rows: list[HelpRow], cell: str) -> list[HelpRow]:
    found: list[HelpRow] = []
    for ref in filter(None, _REFS.split(cell)):
        skill, _, action = ref.partition(":")
        matches = [r for r in rows if r.skill == skill and (not action or r.action == action)]
        found += matches[:1] or [r for r in rows if r.workflow == skill.removeprefix("bmad-")][:1]
    return found


def _links(rows: list[HelpRow], edges: list[Edge]) -> list[StepLinks]:
    """One entry per workflow, its successors in catalog order, each workflow once, never itself."""
    steps: dict[str, list[NextStep]] = {}
    for source, target, back in edges:
        if source.workflow == target.workflow:
            continue
        offered = steps.setdefault(source.workflow, [])
        if any(step.workflow == target.workflow for step in offered) or len(offered) >= MAX_NEXT:
            continue
        offered.append(NextStep(workflow=target.workflow, agent=target.agent, label=target.label, back=back))
    order = [r.workflow for r in rows]
    return [StepLinks(workflow=w, next=sorted(steps[w], key=lambda s: not s.back)) for w in sorted(steps, key=order.index)]
