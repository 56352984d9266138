"""Check a package directory against the `.bmad` v1.1 format and collect every problem found.

Problems are values, not exceptions, so one pass can report everything a package author has to fix.
Each names a package-relative file, a JSON path (for markdown files: a path into the frontmatter),
what is wrong and how to fix it. Warnings are kept apart from errors: they never stop a load.

Workflow ids (the one rule, kept simple):
- every `bmad.json` `workflows[]` record is a workflow with its own `id`;
- the `entry` workflow is the default and is listed first: if its `workflow` + `graph` paths equal
  a record's, that record is moved to the front; otherwise the entry is an extra workflow whose id
  is the package `name` (the single-workflow layout), which must not clash with a record id.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.base.frontmatter import FrontmatterError
from core.base.frontmatter import parse as parse_frontmatter
from core.base.nesting import MAX_DEPTH, too_deep

from .foreign import BMAD_TREE_CODE, bmad_tree_kind, classic_workflow_files, missing_manifest
from .problems import (
    CLASSIC_CODE,
    ClassicWorkflowNotSupported,
    PackageInvalid,
    Problem,
    json_path,
    schema_problems,
    short_value,
)

__all__ = [
    "CLASSIC_CODE", "ClassicWorkflowNotSupported", "PackageInvalid", "Problem", "PackageDocs", "WorkflowDocs",
    "StepDoc", "check_package_dir", "classic_workflow_files", "json_path", "package_ref", "schema_problems",
    "BMAD_TREE_CODE", "bmad_tree_kind",
]

MAX_DOCUMENT_BYTES = 10 * 1024 * 1024
_NODE_TYPES_NEEDING_BRANCHES = ("decision",)
_PROJECT_SIDE = ("@project", "{project-root}", "{artifacts-root}", "@state", "{state-root}")
_CLASSIC_SUFFIXES = (".yaml", ".yml", ".xml")
_DRIVE = re.compile(r"^[A-Za-z]:")


@dataclass
class StepDoc:
    path: str
    frontmatter: dict[str, Any]
    body: str
    text: str


@dataclass
class WorkflowDocs:
    """One workflow as read from disk, after its checks passed."""

    id: str
    display_name: str
    description: str | None
    workflow_path: str
    graph_path: str
    graph: dict[str, Any]
    template: str
    steps: dict[str, StepDoc]
    node_files: dict[str, str]  # node id -> package-relative path actually found


@dataclass
class PackageDocs:
    root: Path
    manifest: dict[str, Any]
    agents_path: str
    agents: dict[str, Any]
    workflows: list[WorkflowDocs]


@dataclass
class _WorkflowRef:
    id: str
    workflow: str
    graph: str
    where: str  # JSON path in bmad.json of the record (or "$.entry")
    display_name: str | None = None
    description: str | None = None


@dataclass
class _MenuTargets:
    workflow_ids: list[str]
    workflow_paths: list[str]
    prompt_ids: set[str] = field(default_factory=set)


def package_ref(ref: str) -> str | None:
    """Normalise a package reference (`@pkg/x`, `{package-root}/x`, `./x`, `x`) to `x`.

    None when the reference is not a plain relative path that stays inside the package.
    """
    ref = ref.strip()
    for prefix in ("@pkg/", "{package-root}/"):
        ref = ref.removeprefix(prefix)
    if not ref or "\x00" in ref or "\\" in ref or ref.startswith("/") or _DRIVE.match(ref):
        return None
    parts = [p for p in ref.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


def check_package_dir(root: Path) -> tuple[PackageDocs | None, list[Problem]]:
    """Read and check everything in `root`; the docs are returned only when no error was found."""
    inspection = _Inspection(root)
    docs = inspection.run()
    has_errors = any(p.level == "error" for p in inspection.problems)
    return (None if has_errors else docs), inspection.problems


def _without_blank_dates(fm: dict[str, Any]) -> dict[str, Any]:
    """Templates ship `updatedAt: ""`; an empty date means "not set yet" (SPEC §9.13)."""
    out = {k: v for k, v in fm.items() if not (k == "updatedAt" and v == "")}
    log = out.get("decisionLog")
    if isinstance(log, list):
        out["decisionLog"] = [
            {k: v for k, v in e.items() if not (k == "decidedAt" and v == "")} if isinstance(e, dict) else e
            for e in log
        ]
    return out


# --- the inspection ---------------------------------------------------------------------------


class _Inspection:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.problems: list[Problem] = []

    def error(self, file: str, path: str, message: str, fix: str, code: str = "PACKAGE_INVALID") -> None:
        self.problems.append(Problem(file, path, message, fix, "error", code))

    def warn(self, file: str, path: str, message: str, fix: str, code: str = "PACKAGE_WARNING") -> None:
        self.problems.append(Problem(file, path, message, fix, "warning", code))

    # files

    def locate(self, ref: str, *, base: str = "") -> str | None:
        """Package-relative path of an existing regular file inside the package, else None."""
        rel = package_ref(f"{base}/{ref}" if base else ref)
        if rel is None:
            return None
        real = (self.root / rel).resolve()
        if not real.is_relative_to(self.root) or not real.is_file():
            return None
        return rel

    def require_file(self, ref: Any, file: str, where: str, what: str) -> str | None:
        if not isinstance(ref, str):
            return None  # the schema already reported it
        rel = package_ref(ref)
        if rel is None:
            self.error(file, where, f"{what} path {short_value(ref)} is not a path inside the package",
                       "use a path relative to the package root, without '..' or a leading '/'", "PATH_INVALID")
            return None
        found = self.locate(rel)
        if found is None:
            outside = (self.root / rel).exists() and not (self.root / rel).resolve().is_relative_to(self.root)
            message = f"{what} '{rel}' points outside the package" if outside else f"{what} '{rel}' does not exist"
            self.error(file, where, message, "add the file to the package or correct the path", "FILE_MISSING")
        return found

    def read_text(self, rel: str) -> str | None:
        path = self.root / rel
        try:
            if path.stat().st_size > MAX_DOCUMENT_BYTES:
                self.error(rel, "", f"file is larger than {MAX_DOCUMENT_BYTES // (1024 * 1024)} MB",
                           "keep package documents small; move bulky data out of the package")
                return None
            return path.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError:
            self.error(rel, "", "file is not UTF-8 text", "save the file as UTF-8")
        except OSError as exc:
            self.error(rel, "", f"file cannot be read ({exc.strerror or 'I/O error'})", "check the file's permissions")
        return None

    def read_json(self, rel: str, schema: str) -> dict[str, Any] | None:
        text = self.read_text(rel)
        if text is None:
            return None
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            self.error(rel, "$", f"invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}",
                       "fix the JSON syntax there (often a missing comma, quote or bracket)", "JSON_INVALID")
            return None
        except RecursionError:  # nested deeper than the parser goes
            doc, deep = None, True
        else:
            deep = too_deep(doc)
        if deep:
            self.error(rel, "$", f"values are nested more than {MAX_DEPTH} levels deep",
                       "use a flatter structure; package documents need only a few levels", "JSON_TOO_DEEP")
            return None
        self.problems += schema_problems(doc, schema, rel)
        return doc if isinstance(doc, dict) else None

    def read_markdown(self, rel: str, schema: str) -> StepDoc | None:
        text = self.read_text(rel)
        if text is None:
            return None
        try:
            fm, body = parse_frontmatter(text)
        except FrontmatterError as exc:
            if "not valid YAML" in exc.message:
                fix = "fix the YAML syntax between the '---' lines"
            elif "aliases" in exc.message:
                fix = "write every value out in full, without &anchors or *aliases"
            elif "nested" in exc.message:
                fix = "use flatter values; frontmatter needs only a few levels"
            else:
                fix = "start the file with a '---' line, YAML key: value lines, and a closing '---' line"
            self.error(rel, "$", exc.message, fix, "FRONTMATTER_INVALID")
            return None
        checked = _without_blank_dates(fm) if schema == "workflow-frontmatter" else fm
        self.problems += schema_problems(checked, schema, rel)
        return StepDoc(rel, fm, body, text)

    # package

    def run(self) -> PackageDocs | None:
        if not (self.root / "bmad.json").is_file():
            self.problems.append(missing_manifest(self.root))
            return None
        manifest = self.read_json("bmad.json", "bmad")
        if manifest is None:
            return None
        refs = self.workflow_refs(manifest)
        entry = manifest.get("entry") if isinstance(manifest.get("entry"), dict) else {}
        agents_path = self.require_file(entry.get("agents"), "bmad.json", "$.entry.agents", "agents file")
        agents = self.read_json(agents_path, "agents") if agents_path else None
        agent_ids = self.agent_ids(agents, agents_path) if agents is not None else None
        assets = entry.get("assetsDir")
        if isinstance(assets, str) and assets.strip() and not self.is_dir(assets):
            self.warn("bmad.json", "$.entry.assetsDir", f"assets directory '{assets}' does not exist",
                      "add the directory or remove entry.assetsDir")
        workflows = [self.check_workflow(ref, agent_ids) for ref in refs]
        self.check_subworkflows([w for w in workflows if w], {r.id for r in refs})
        if agents is not None and agents_path:
            self.check_menus(agents, agents_path, refs)
        if any(w is None for w in workflows) or agents is None or not agents_path:
            return None
        return PackageDocs(self.root, manifest, agents_path, agents, [w for w in workflows if w])

    def is_dir(self, ref: str) -> bool:
        rel = package_ref(ref)
        if rel is None:
            return False
        real = (self.root / rel).resolve()
        return real.is_relative_to(self.root) and real.is_dir()

    def workflow_refs(self, manifest: dict[str, Any]) -> list[_WorkflowRef]:
        refs: list[_WorkflowRef] = []
        records = manifest.get("workflows") if isinstance(manifest.get("workflows"), list) else []
        for i, rec in enumerate(records):
            if not (isinstance(rec, dict) and all(isinstance(rec.get(k), str) for k in ("id", "workflow", "graph"))):
                continue
            if any(r.id == rec["id"] for r in refs):
                self.error("bmad.json", f"$.workflows[{i}].id", f"workflow id '{rec['id']}' is used twice",
                           "give every workflows[] record its own id")
                continue
            refs.append(_WorkflowRef(rec["id"], rec["workflow"], rec["graph"], f"$.workflows[{i}]",
                                     rec.get("displayName"), rec.get("description")))
        entry = manifest.get("entry")
        if not (isinstance(entry, dict) and isinstance(entry.get("workflow"), str) and isinstance(entry.get("graph"), str)):
            return refs
        key = (package_ref(entry["workflow"]), package_ref(entry["graph"]))
        match = next((r for r in refs if (package_ref(r.workflow), package_ref(r.graph)) == key), None)
        if match is not None:
            refs.remove(match)
            return [match, *refs]
        name = manifest.get("name")
        if not isinstance(name, str) or not name:
            return refs
        if any(r.id == name for r in refs):
            self.error("bmad.json", "$.entry",
                       f"the entry workflow is not one of workflows[], and its derived id '{name}' (the package "
                       "name) is already a workflows[] id with other paths",
                       "point entry.workflow and entry.graph at that record's paths, or rename the record")
            return refs
        description = manifest.get("description") if isinstance(manifest.get("description"), str) else None
        return [_WorkflowRef(name, entry["workflow"], entry["graph"], "$.entry", None, description), *refs]

    def agent_ids(self, agents: dict[str, Any], file: str) -> set[str]:
        ids: set[str] = set()
        items = agents.get("agents") if isinstance(agents.get("agents"), list) else []
        for i, agent in enumerate(items):
            aid = agent.get("id") if isinstance(agent, dict) else None
            if not isinstance(aid, str):
                continue
            if aid in ids:
                self.error(file, f"$.agents[{i}].id", f"agent id '{aid}' is used twice", "give every agent its own id")
            ids.add(aid)
        return ids

    # workflows

    def check_workflow(self, ref: _WorkflowRef, agent_ids: set[str] | None) -> WorkflowDocs | None:
        wf_rel = self.require_file(ref.workflow, "bmad.json", f"{ref.where}.workflow", "workflow template")
        graph_rel = self.require_file(ref.graph, "bmad.json", f"{ref.where}.graph", "workflow graph")
        template = self.read_markdown(wf_rel, "workflow-frontmatter") if wf_rel else None
        graph = self.read_json(graph_rel, "workflow-graph") if graph_rel else None
        if graph is None or graph_rel is None:
            return None
        checked = self.check_graph(graph, graph_rel, agent_ids)
        if template is None or checked is None:
            return None
        steps, node_files = checked
        current = template.frontmatter.get("currentNodeId")
        if isinstance(current, str) and current and current not in steps:
            self.warn(template.path, "$.currentNodeId", f"'{current}' is not a node of {graph_rel}",
                      f"set it to the entry node '{graph.get('entryNodeId')}' or leave it empty")
        return WorkflowDocs(
            id=ref.id,
            display_name=ref.display_name or _first_heading(template.body) or ref.id,
            description=ref.description,
            workflow_path=template.path,
            graph_path=graph_rel,
            graph=graph,
            template=template.text,
            steps=steps,
            node_files=node_files,
        )

    def check_graph(
        self, graph: dict[str, Any], file: str, agent_ids: set[str] | None
    ) -> tuple[dict[str, StepDoc], dict[str, str]] | None:
        nodes = graph.get("nodes") if isinstance(graph.get("nodes"), list) else []
        edges = graph.get("edges") if isinstance(graph.get("edges"), list) else []
        index: dict[str, int] = {}
        for i, node in enumerate(nodes):
            nid = node.get("id") if isinstance(node, dict) else None
            if not isinstance(nid, str):
                continue
            if nid in index:
                self.error(file, f"$.nodes[{i}].id", f"node id '{nid}' is used twice", "give every node its own id",
                           "GRAPH_INTEGRITY_INVALID")
                continue
            index[nid] = i
        entry = graph.get("entryNodeId")
        if isinstance(entry, str) and entry not in index:
            self.error(file, "$.entryNodeId", f"entry node '{entry}' is not in nodes",
                       "set entryNodeId to the id of the first node", "GRAPH_INTEGRITY_INVALID")
        outgoing = {nid: 0 for nid in index}
        for j, edge in enumerate(edges):
            if not isinstance(edge, dict):
                continue
            for end in ("from", "to"):
                target = edge.get(end)
                if isinstance(target, str) and target not in index:
                    self.error(file, f"$.edges[{j}].{end}", f"edge {end} '{target}' is not a node id",
                               "use the id of an existing node, or add the node", "GRAPH_INTEGRITY_INVALID")
            if edge.get("from") in outgoing:
                outgoing[edge["from"]] += 1
        base = file.rpartition("/")[0]
        steps: dict[str, StepDoc] = {}
        node_files: dict[str, str] = {}
        for nid, i in index.items():
            node = nodes[i]
            where = f"$.nodes[{i}]"
            if node.get("type") in _NODE_TYPES_NEEDING_BRANCHES and outgoing[nid] < 2:
                self.warn(file, where, f"decision node '{nid}' has {outgoing[nid]} outgoing edge(s)",
                          "give a decision node at least two outgoing edges, one with isDefault: true")
            agent = node.get("agentId")
            if agent_ids is not None and isinstance(agent, str) and agent not in agent_ids:
                self.error(file, f"{where}.agentId", f"agent '{agent}' is not defined in agents.json",
                           "use one of: " + ", ".join(sorted(agent_ids)), "GRAPH_INTEGRITY_INVALID")
            step = self.check_node_file(node, nid, file, where, base)
            if step is not None:
                steps[nid] = step
                node_files[nid] = step.path
        if index and not any(isinstance(n, dict) and n.get("type") == "end" for n in nodes):
            self.warn(file, "$.nodes", "the graph has no end node", "add a node of type 'end' that finishes the run")
        if len(steps) != len(index):
            return None
        return steps, node_files

    def check_node_file(self, node: dict[str, Any], nid: str, graph_file: str, where: str, base: str) -> StepDoc | None:
        ref = node.get("file")
        if not isinstance(ref, str):
            return None
        rel = self.locate(ref) or (self.locate(ref, base=base) if base else None)
        if rel is None:
            self.error(graph_file, f"{where}.file", f"step file '{ref}' of node '{nid}' does not exist",
                       "add the file, or correct the path (relative to the package root)", "FILE_MISSING")
            return None
        step = self.read_markdown(rel, "step-frontmatter")
        if step is None:
            return None
        fm_id, fm_type = step.frontmatter.get("nodeId"), step.frontmatter.get("type")
        if isinstance(fm_id, str) and fm_id != nid:
            self.error(rel, "$.nodeId", f"nodeId '{fm_id}' does not match graph node '{nid}' ({graph_file} {where})",
                       f"set nodeId to '{nid}', or point the graph node at the right file", "GRAPH_INTEGRITY_INVALID")
        if isinstance(fm_type, str) and isinstance(node.get("type"), str) and fm_type != node["type"]:
            self.warn(rel, "$.type", f"type '{fm_type}' differs from the graph's '{node['type']}'",
                      "make the step file agree with the graph (the graph wins)")
        return step

    # sub-workflow calls

    def check_subworkflows(self, workflows: list[WorkflowDocs], ids: set[str]) -> None:
        """Every subworkflow node names a workflow of this package, can continue after the call,
        and no workflow ends up calling itself (directly or through others): that run would never end."""
        calls: dict[str, list[tuple[str, str]]] = {}  # caller id -> [(callee id, step file)]
        known = ", ".join(sorted(ids)) or "none"
        for wf in workflows:
            nodes = wf.graph.get("nodes") if isinstance(wf.graph.get("nodes"), list) else []
            edges = wf.graph.get("edges") if isinstance(wf.graph.get("edges"), list) else []
            for i, node in enumerate(nodes):
                nid = node.get("id") if isinstance(node, dict) else None
                step = wf.steps.get(nid) if isinstance(nid, str) else None
                if step is None:
                    continue
                ref = step.frontmatter.get("subworkflowRef")
                if node.get("type") != "subworkflow":
                    if ref is not None:
                        self.warn(step.path, "$.subworkflowRef",
                                  f"subworkflowRef is ignored: graph node '{nid}' has type '{node.get('type')}'",
                                  f"set the type of node '{nid}' in {wf.graph_path} to subworkflow, or remove "
                                  "subworkflowRef")
                    continue
                if not isinstance(ref, str) or not ref.strip():
                    self.error(step.path, "$.subworkflowRef",
                               f"subworkflow node '{nid}' does not say which workflow it runs",
                               f"add 'subworkflowRef: <workflow id>' to the frontmatter (one of: {known})",
                               "SUBWORKFLOW_REF_INVALID")
                elif ref not in ids:
                    self.error(step.path, "$.subworkflowRef",
                               f"subworkflowRef '{ref}' is not a workflow of this package",
                               f"use the id of a workflow listed in bmad.json (one of: {known})",
                               "SUBWORKFLOW_REF_INVALID")
                else:
                    calls.setdefault(wf.id, []).append((ref, step.path))
                passing = step.frontmatter.get("passVariables")
                if passing is not None and not (isinstance(passing, list) and all(isinstance(v, str) for v in passing)):
                    self.error(step.path, "$.passVariables", "passVariables must be a list of variable names",
                               "write it as a YAML list of names, e.g. passVariables: [featureName]",
                               "SUBWORKFLOW_REF_INVALID")
                if not any(isinstance(e, dict) and e.get("from") == nid for e in edges):
                    self.error(wf.graph_path, f"$.nodes[{i}]",
                               f"subworkflow node '{nid}' has no outgoing edge, so '{wf.id}' could not go on "
                               "after the call",
                               f"add an edge from '{nid}' to the node that follows the call",
                               "GRAPH_INTEGRITY_INVALID")
        for caller, targets in calls.items():
            for callee, step_path in targets:
                back = _call_path(calls, callee, caller)
                if back is not None:
                    chain = " → ".join([caller, *back])
                    self.error(step_path, "$.subworkflowRef",
                               f"workflow '{caller}' calls '{callee}', which leads back to '{caller}' ({chain}); "
                               "such a run would never end",
                               f"remove this call, or make sure '{callee}' never calls '{caller}' again",
                               "SUBWORKFLOW_CYCLE")

    # menus

    def check_menus(self, agents: dict[str, Any], file: str, refs: list[_WorkflowRef]) -> None:
        targets = _MenuTargets([r.id for r in refs], [p for r in refs if (p := package_ref(r.workflow))])
        items = agents.get("agents") if isinstance(agents.get("agents"), list) else []
        for i, agent in enumerate(items):
            if not isinstance(agent, dict):
                continue
            prompts = agent.get("prompts") if isinstance(agent.get("prompts"), list) else []
            targets.prompt_ids = {p["id"] for p in prompts if isinstance(p, dict) and isinstance(p.get("id"), str)}
            menu = agent.get("menu") if isinstance(agent.get("menu"), list) else []
            for j, item in enumerate(menu):
                if not isinstance(item, dict) or str(item.get("unavailable") or "").strip():
                    continue  # an item an import marked unavailable is refused with its reason: nothing to fix
                where = f"$.agents[{i}].menu[{j}]"
                self.check_menu_refs(item, file, where, targets)
                triggers = item.get("triggers") if isinstance(item.get("triggers"), list) else []
                for k, trigger in enumerate(triggers):
                    if isinstance(trigger, dict):
                        self.check_menu_refs(trigger, file, f"{where}.triggers[{k}]", targets)
                if item.get("ide-only") is True and item.get("web-only") is True:
                    self.error(file, where, "the item is both ide-only and web-only, so no surface can show it",
                               "keep at most one of ide-only / web-only")

    def check_menu_refs(self, item: dict[str, Any], file: str, where: str, targets: _MenuTargets) -> None:
        workflow, exec_, action, data = (item.get(k) for k in ("workflow", "exec", "action", "data"))
        if isinstance(workflow, str) and workflow.strip():
            self.check_menu_workflow(workflow.strip(), file, f"{where}.workflow", targets)
        if isinstance(exec_, str) and exec_.strip():
            self.check_menu_exec(exec_.strip(), file, f"{where}.exec", targets)
        if isinstance(data, str) and data.strip():
            self.check_menu_file(data.strip(), file, f"{where}.data", "data file", required=False)
        if isinstance(action, str) and action.startswith("#") and action[1:] not in targets.prompt_ids:
            self.warn(file, f"{where}.action", f"prompt '{action[1:]}' is not defined in this agent's prompts",
                      "add a prompt with that id, or fix the action")

    def check_menu_workflow(self, value: str, file: str, where: str, targets: _MenuTargets) -> None:
        if value in targets.workflow_ids or package_ref(value) in targets.workflow_paths:
            return
        if value.lower().endswith(_CLASSIC_SUFFIXES):
            self.warn(file, where, f"'{value}' is a classic BMAD workflow; this menu item will be refused",
                      "point the item at a v1.1 workflow id or workflow.md", CLASSIC_CODE)
            return
        self.error(file, where,
                   f"workflow '{value}' is neither a workflow id ({', '.join(targets.workflow_ids) or 'none'}) "
                   f"nor a workflow.md listed in bmad.json ({', '.join(targets.workflow_paths) or 'none'})",
                   "use one of those ids or paths", "UNKNOWN_WORKFLOW")

    def check_menu_exec(self, value: str, file: str, where: str, targets: _MenuTargets) -> None:
        """An exec runs the workflow whose workflow.md it names exactly, else it is a markdown script.
        A workflow-named file that is not a listed workflow would never run as one: an error."""
        if package_ref(value) in targets.workflow_paths:
            return
        name = value.rsplit("/", 1)[-1].lower()
        if name.startswith("workflow") and name.endswith(".md"):
            listed = ", ".join(targets.workflow_paths) or "none"
            self.error(file, where,
                       f"exec '{value}' names a workflow file that is not one of this package's workflows ({listed})",
                       "point exec at one of those workflow.md paths, or add a bmad.json workflows[] record "
                       "(id, workflow, graph) for this file", "UNKNOWN_WORKFLOW")
            return
        self.check_menu_file(value, file, where, "exec file", required=True)

    def check_menu_file(self, value: str, file: str, where: str, what: str, *, required: bool) -> None:
        if value.startswith(_PROJECT_SIDE):
            return  # lives in the project, checked when the item is used
        if required and value.lower().endswith(_CLASSIC_SUFFIXES):
            self.warn(file, where, f"'{value}' is a classic BMAD workflow; this menu item will be refused",
                      "point the item at a markdown file", CLASSIC_CODE)
            return
        if self.locate(value) is not None:
            return
        reason = "is not a path inside the package" if package_ref(value) is None else "does not exist in the package"
        fix = "add the file to the package, or use an @project/... path for project files"
        if required:
            self.error(file, where, f"{what} '{value}' {reason}", fix, "FILE_MISSING")
        else:
            self.warn(file, where, f"{what} '{value}' {reason}", fix)


def _call_path(calls: dict[str, list[tuple[str, str]]], start: str, goal: str) -> list[str] | None:
    """The workflows from `start` to `goal` along sub-workflow calls (both included), or None."""
    paths: dict[str, list[str]] = {start: [start]}
    queue = [start]
    while queue:
        current = queue.pop(0)
        if current == goal:
            return paths[current]
        for callee, _ in calls.get(current, []):
            if callee not in paths:
                paths[callee] = [*paths[current], callee]
                queue.append(callee)
    return None


def _first_heading(markdown: str) -> str | None:
    for line in markdown.splitlines():
        if line.startswith("# "):
            return line[2:].strip() or None
    return None
