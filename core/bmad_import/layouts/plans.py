"""Every workflow of a tree planned as a graph: step-file workflows, skills and classic workflows.

Entries are the v6.0 workflow files (`workflow*.md`, classic `workflow.yaml`) plus, for v6.1+, one per
skill folder: its `workflow.md`, else its `SKILL.md` (a skill whose steps its own text names, or a
single-file skill whose only step is that file). A skill's workflow id is its name without the `bmad-`
prefix. Classic entries (`workflow.yaml`, `<workflow>`-XML `workflow.md`) go to the classic converter,
the rest to the step-file builder. Every entry gets its id before anything is built, so a workflow
that calls another (a file reference, a skill, an `<invoke-workflow>`) nests it whatever its kind.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from ..agents import CLASSIC_REASON
from ..classic import classic_identity, is_classic_workflow_md, plan_classic_workflow
from ..config_map import ConfigMap
from ..report import ImportReport
from ..source import BmadSource
from ..step_workflows import WorkflowBuilder, WorkflowPlan, workflow_identity
from .skills import Skill, resolve_activation


@dataclass
class Planned:
    plans: list[WorkflowPlan]
    builder: WorkflowBuilder
    skill_targets: dict[str, tuple[str, str] | str] = field(default_factory=dict)  # name -> (id, path) | why not
    classic_failed: set[str] = field(default_factory=set)  # classic entries that could not be imported (reported)


def plan_workflows(source: BmadSource, generated: set[str], skills: list[Skill], config: ConfigMap,
                   report: ImportReport) -> Planned:
    by_entry = {s.entry: s for s in skills if s.kind != "agent"}
    agent_dirs = tuple(s.folder + "/" for s in skills if s.kind == "agent")
    files = [f for f in source.workflow_files() if not f.startswith(agent_dirs)]
    files += sorted(e for e in by_entry if e not in files)
    files += [c for c in source.classic_workflows() if c.endswith((".yaml", ".yml")) and c not in files]
    classic = {rel for rel in files if rel.endswith((".yaml", ".yml")) or _is_classic(source, rel, by_entry)}
    entries: dict[str, str] = {}
    for rel in files:
        _add_entry(entries, rel, _identity(source, rel, by_entry.get(rel), rel in classic), report)
    planned = Planned([], WorkflowBuilder(source, generated, entries, {}))
    trial = ImportReport(source="", layout="", package="", version="")  # which classic ones import at all, quietly
    trial_builder = WorkflowBuilder(source, generated, dict(entries), {})
    for rel in sorted(classic):
        if plan_classic_workflow(source, rel, trial_builder, config, trial) is None:
            del entries[rel]  # so that nothing calls it; the real pass below reports why
            planned.classic_failed.add(rel)
    builder = planned.builder
    builder.skill_ids = {s.name: entries[s.entry] for s in by_entry.values() if s.entry in entries}
    builder.first_steps = {step: wid for rel, wid in entries.items()
                           if rel not in classic and (step := builder.first_step(rel))}
    for rel in sorted(classic):  # first, so that step files naming them nest what they call
        skill = by_entry.get(rel)
        plan = plan_classic_workflow(source, rel, builder, config, report)  # one that fails says why here
        if plan is None:
            entries.pop(rel, None)
            planned.classic_failed.add(rel)
            planned.skill_targets[rel] = CLASSIC_REASON  # a menu item naming the file by path is unavailable
            if skill is not None:
                planned.skill_targets[skill.name] = CLASSIC_REASON
            continue
        _add_plan(planned, plan, skill)
    claimed: set[str] = set()
    configs = [f"@pkg/_bmad/{m}/config.yaml" for m in source.modules]
    for rel in [r for r in entries if r not in classic]:
        skill = by_entry.get(rel)
        plan = builder.build(rel)
        shared = [n.rel for n in plan.nodes[1:] if n.rel in claimed]
        if shared:
            report.leave_out(rel, "its step files also belong to another workflow: " + ", ".join(shared))
            if skill is not None:
                planned.skill_targets[skill.name] = "its step files also belong to another workflow"
            continue
        claimed.update(n.rel for n in plan.nodes)
        if skill is not None:
            _skill_texts(plan, skill, configs)
        _add_plan(planned, plan, skill)
    planned.plans.sort(key=lambda p: p.entry)
    return planned


def _identity(source: BmadSource, rel: str, skill: Skill | None, classic: bool) -> str:
    if skill is not None:
        return skill.workflow_id
    return classic_identity(source, rel)[0] if classic else workflow_identity(source, rel)[0]


def _add_entry(entries: dict[str, str], rel: str, wid: str, report: ImportReport) -> None:
    if wid in entries.values():
        module = rel.split("/", 1)[0]
        report.warnings.append(f"workflow id '{wid}' is used twice; `{rel}` becomes '{module}-{wid}'")
        wid = f"{module}-{wid}"
    entries[rel] = wid


def _add_plan(planned: Planned, plan: WorkflowPlan, skill: Skill | None) -> None:
    planned.plans.append(plan)
    if skill is None:
        return
    planned.skill_targets[skill.name] = (plan.id, plan.template_path)
    plan.description = plan.description or skill.description
    if plan.display_name.strip().lower() in ("", "overview", skill.name.lower()):  # a generic heading
        plan.display_name = skill.workflow_id.replace("-", " ").title()
    if plan.nodes[0].title.strip().lower() in ("", "overview", skill.name.lower()):
        plan.nodes[0].title = plan.display_name
    how = {"single": "one-step workflow (the skill's `SKILL.md`, its references carried)",
           "workflow": "step-file workflow", "classic": "classic workflow"}[skill.kind]
    plan.report.notes.insert(0, f"skill `{skill.name}` ({skill.folder}) imported as a {how}")


def _is_classic(source: BmadSource, rel: str, by_entry: dict[str, Skill]) -> bool:
    skill = by_entry.get(rel)
    if skill is not None:
        return skill.kind == "classic"
    return posixpath.basename(rel).startswith("workflow") and is_classic_workflow_md(source.read(rel))


def _skill_texts(plan: WorkflowPlan, skill: Skill, configs: list[str]) -> None:
    """Activation resolved in every node file of a skill; the customization listed once, in the first."""
    for i, node in enumerate(plan.nodes):
        if node.rel.startswith("gen:"):
            continue
        text = resolve_activation(node.body, skill, "workflow", configs)
        if i > 0:
            text = text[: text.rfind("## Customization (resolved at import)")].rstrip() + "\n"
        node.body = text
