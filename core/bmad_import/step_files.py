"""The files one workflow plan becomes: node step files, the state template and the graph.

BMAD frontmatter is kept (its file references rewritten to `@pkg/_bmad/...` aliases) and the v1.1
keys are put in front of it; a short note at the top of each step tells the model which file
references are graph moves, which options run a sub-workflow, and which are not available.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from crewagent.core.base.frontmatter import render as render_frontmatter

from .config_map import ConfigMap, substitute
from .references import Resolver, package_alias
from .source import BmadSource
from .step_workflows import V11_KEYS, Node, WorkflowBuilder, WorkflowPlan


def workflow_files(plan: WorkflowPlan, builder: WorkflowBuilder, config: ConfigMap, source: BmadSource) -> dict[str, str]:
    values = config.substitutions()
    files = {n.package_path: _node_file(n, plan, builder, values, source) for n in plan.nodes}
    files[plan.graph_path] = json.dumps(plan.graph(), indent=2, ensure_ascii=False) + "\n"
    files[plan.template_path] = _template(plan, config)
    return files


def _node_file(node: Node, plan: WorkflowPlan, builder: WorkflowBuilder, values: dict[str, str],
               source: BmadSource) -> str:
    head: dict[str, Any] = {"schemaVersion": "1.1", "nodeId": node.id, "type": node.type}
    if node.title:
        head["title"] = node.title
    head["transitions"] = [
        {"to": e.to, "label": e.label, "isDefault": e.default, **({"conditionText": e.condition} if e.condition else {})}
        for e in node.edges
    ]
    if node.type == "end":
        head["setsVariables"] = ["workflowStatus"]
        return render_frontmatter(head, _END_BODY.format(workflow=plan.display_name, node=node.id))
    if node.type == "subworkflow":
        head["subworkflowRef"] = node.frontmatter["subworkflowRef"]
        back = node.edges[0].to
        body = (f"# Run `{head['subworkflowRef']}`\n\nThis node runs the `{head['subworkflowRef']}` workflow of this "
                f"package as a sub-workflow (own state, same project). When it completes, the run returns to "
                f"`{back}`, which offers its options again.\n")
        return render_frontmatter(head, body)
    if node.rel.startswith("gen:"):  # a node synthesized by the importer (classic workflows): body is final
        return render_frontmatter(head, node.body)
    resolver = builder.resolver(node.rel, node.frontmatter, plan.entry)
    kept: dict[str, Any] = {}
    for key, value in node.frontmatter.items():
        name = f"bmad.{key}" if key in V11_KEYS else key
        kept[name] = _rewrite_value(value, resolver, values, set(builder.entries))
    text = substitute(resolver.rewrite(node.body), values)
    return render_frontmatter({**head, **kept}, _note(node, plan, source) + text.lstrip("\n"))


def _rewrite_value(value: Any, resolver: Resolver, values: dict[str, str], imported: set[str]) -> Any:
    if isinstance(value, str):
        ref = resolver.resolve(value)
        if ref is not None and ref.kind == "classic" and ref.rel not in imported:
            return f"unavailable: {ref.rel} is a classic BMAD workflow, not imported"
        return substitute(resolver.rewrite(value), values)
    if isinstance(value, list):
        return [_rewrite_value(v, resolver, values, imported) for v in value]
    if isinstance(value, dict):
        return {k: _rewrite_value(v, resolver, values, imported) for k, v in value.items()}
    return value


def _note(node: Node, plan: WorkflowPlan, source: BmadSource) -> str:
    by_id = {n.id: n for n in plan.nodes}
    lines = [f"> **Imported from BMAD** `{node.rel}`. Step files are graph nodes here: instead of loading the "
             "next step file, complete this node and set `currentNodeId` to the node (see allowedNext)."]
    for edge in node.edges:
        target = by_id[edge.to]
        if target.type == "subworkflow":
            lines.append(f"> - {edge.label}: move to node `{target.id}`; it runs that workflow and comes back here")
        elif target.type == "end":
            lines.append(f"> - {edge.label}: node `{target.id}` finishes the workflow")
        else:
            lines.append(f"> - `{posixpath.basename(target.rel)}` ({edge.label}) is node `{target.id}`")
    for target in node.handoffs:
        lines.append(f"> - the `{target}` workflow this step mentions is not run from here (it leads back to this "
                     "workflow); when this workflow is done, suggest starting it from the agent's menu")
    for rel in node.refused:
        lines.append(f"> - `{rel}` is a classic BMAD workflow and is not available here; if the user picks the "
                     "option that runs it, say so and offer the other options")
    if node is plan.nodes[0]:
        configs = sorted({f"{m}/config.yaml" for m in source.modules})
        lines.append("> - configuration: " + ", ".join(f"`{package_alias(c)}`" for c in configs))
    return "\n".join(lines) + "\n\n"


def _template(plan: WorkflowPlan, config: ConfigMap) -> str:
    fm: dict[str, Any] = {
        "schemaVersion": "1.1",
        "workflowType": plan.id,
        "runId": "",
        "project_name": _value(config, "project_name"),
        "user_name": _value(config, "user_name"),
        "date": "",
        "updatedAt": "",
        "currentNodeId": plan.nodes[0].id,
        "stepsCompleted": [],
        "variables": dict(plan.variables),
        "decisionLog": [],
        "artifacts": [],
        "bmadSource": plan.entry,
    }
    for key in ("communication_language", "document_output_language", "user_skill_level"):
        if _value(config, key):
            fm[key] = _value(config, key)
    index = "\n".join(f"{i}. `{n.id}` ({n.type}) — {n.title or n.id}" for i, n in enumerate(plan.nodes, start=1))
    body = (
        f"# {plan.display_name}\n\n{plan.description}\n\n"
        f"Imported from BMAD `{plan.entry}`.\n\n"
        "## How To Execute (LLM)\n\n"
        f"1. `currentNodeId` in `@state/workflow.md` is the node to run; its step file is in the NODE_BRIEF.\n"
        f"2. Follow the step file; the graph `@pkg/{plan.graph_path}` lists the only allowed moves.\n"
        "3. Record progress with `fs_apply_patch` (`updateFrontmatter`): `stepsCompleted`, `currentNodeId`, "
        "`variables`, `artifacts`.\n"
        "4. The end node sets `variables.workflowStatus` to \"complete\".\n\n"
        "## Steps Index\n\nFor readers only; `workflow.graph.json` is authoritative.\n\n" + index + "\n"
    )
    return render_frontmatter(fm, body)


def _value(config: ConfigMap, key: str) -> str:
    entry = config.keys.get(key)
    return entry.text if entry is not None and entry.kind == "value" else ""


_END_BODY = """# Finish: {workflow}

The BMAD steps are done. Mark the workflow complete, then tell the user in a few bullets what was
produced (the documents written, with their paths) and what they could run next.

## Completion

Call `fs_apply_patch` on `@state/workflow.md` with `updateFrontmatter`: append `{node}` to
`stepsCompleted` and set `variables.workflowStatus` to `"complete"`. This is the end node: do not
change `currentNodeId`.
"""
