"""Every workflow of a tree planned as a graph: step-file workflows, skills and classic workflows.

Entries are the v6.0 workflow files (`workflow*.md`) plus, for v6.1+, one per skill folder: its
`workflow.md`, else its `SKILL.md` (a skill whose steps its own text names, or a single-file skill
whose only step is that file). A skill's workflow id is its name without the `bmad-` prefix.
Classic `<workflow>`-XML entries go through `classic_seam`; the rest through the step-file builder.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from ..config_map import ConfigMap
from ..report import ImportReport
from ..source import BmadSource
from ..step_workflows import WorkflowBuilder, WorkflowPlan, workflow_identity
from .classic_seam import plan_classic
from .skills import Skill, is_xml_workflow, resolve_activation


@dataclass
class Planned:
    plans: list[WorkflowPlan]
    builder: WorkflowBuilder
    skill_targets: dict[str, tuple[str, str] | str] = field(default_factory=dict)  # name -> (id, path) | why not
    classic_pending: dict[str, str] = field(default_factory=dict)  # entry -> why it is unavailable


def plan_workflows(source: BmadSource, generated: set[str], skills: list[Skill], config: ConfigMap,
                   report: ImportReport) -> Planned:
    by_entry = {s.entry: s for s in skills if s.kind != "agent"}
    agent_dirs = tuple(s.folder + "/" for s in skills if s.kind == "agent")
    files = [f for f in source.workflow_files() if not f.startswith(agent_dirs)]
    files += sorted(e for e in by_entry if e not in files)
    entries: dict[str, str] = {}
    for rel in files:
        wid = by_entry[rel].workflow_id if rel in by_entry else workflow_identity(source, rel)[0]
        if wid in entries.values():
            module = rel.split("/", 1)[0]
            report.warnings.append(f"workflow id '{wid}' is used twice; `{rel}` becomes '{module}-{wid}'")
            wid = f"{module}-{wid}"
        entries[rel] = wid
    classic = {rel for rel in entries if rel.endswith(".md") and _is_classic(source, rel, by_entry)}
    builder = WorkflowBuilder(source, generated, {r: w for r, w in entries.items() if r not in classic}, {})
    builder.skill_ids = {s.name: entries[s.entry] for s in by_entry.values() if s.entry in builder.entries}
    builder.first_steps = {step: wid for rel, wid in builder.entries.items() if (step := builder.first_step(rel))}
    planned = Planned([], builder)
    claimed: set[str] = set()
    configs = [f"@pkg/_bmad/{m}/config.yaml" for m in source.modules]
    for rel, wid in entries.items():
        skill = by_entry.get(rel)
        if rel in classic:
            plan, reason = plan_classic(source, rel, builder, config, report)
            if plan is None:
                planned.classic_pending[rel] = reason
                planned.skill_targets[rel] = reason  # a menu item naming the file by path is unavailable too
                report.leave_out(rel, reason + "; the menu items naming it are marked unavailable")
                if skill is not None:
                    planned.skill_targets[skill.name] = reason
                continue
        else:
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
        planned.plans.append(plan)
        if skill is not None:
            planned.skill_targets[skill.name] = (plan.id, plan.template_path)
            plan.description = plan.description or skill.description
            if plan.display_name.strip().lower() in ("", "overview", skill.name.lower()):  # a generic heading
                plan.display_name = skill.workflow_id.replace("-", " ").title()
            if plan.nodes[0].title.strip().lower() in ("", "overview", skill.name.lower()):
                plan.nodes[0].title = plan.display_name
            how = {"single": "one-step workflow (the skill's `SKILL.md`, its references carried)",
                   "workflow": "step-file workflow", "classic": "classic workflow"}[skill.kind]
            plan.report.notes.insert(0, f"skill `{skill.name}` ({skill.folder}) imported as a {how}")
    return planned


def _is_classic(source: BmadSource, rel: str, by_entry: dict[str, Skill]) -> bool:
    skill = by_entry.get(rel)
    if skill is not None:
        return skill.kind == "classic"
    return posixpath.basename(rel).startswith("workflow") and is_xml_workflow(source.read(rel))


def _skill_texts(plan: WorkflowPlan, skill: Skill, configs: list[str]) -> None:
    """Activation resolved in every node file of a skill; the customization listed once, in the first."""
    for i, node in enumerate(plan.nodes):
        if node.rel.startswith("gen:"):
            continue
        text = resolve_activation(node.body, skill, "workflow", configs)
        if i > 0:
            text = text[: text.rfind("## Customization (resolved at import)")].rstrip() + "\n"
        node.body = text
