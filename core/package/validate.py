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
from pathlib import Path
from typing import Any

from crewagent.core.base.frontmatter import FrontmatterError
from crewagent.core.base.frontmatter import parse as parse_frontmatter
from crewagent.core.base.nesting import MAX_DEPTH, too_deep

from .docs import PackageDocs, StepDoc, WorkflowDocs, WorkflowRef, package_ref
from .foreign import BMAD_TREE_CODE, bmad_tree_kind, classic_workflow_files, missing_manifest
from .menu_checks import MenuChecks
from .subflow_checks import SubworkflowChecks
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


def check_package_dir(root: Path) -> tuple[PackageDocs | None, list[Problem]]:
    """Read and check everything in `root`; the docs are returned only when no error was found."""
    inspection = _Inspection(root)
    docs = inspection.run()
    has_errors = any(p.level == "error" for p in inspection.problems)
    return (None if has_errors else docs), inspection.problems


def _without_blank_dates(fm: dict[str, Any]) -> dict[str, Any]:
    """Templates ship `updatedAt: ""`; an empty date means "not set yet"."""
    out = {k: v for k, v in fm.items() if not (k == "updatedAt" and v == "")}
    log = out.get("decisionLog")
    if isinstance(log, list):
        out["decisionLog"] = [
            {k: v for k, v in e.items() if not (k == "decidedAt" and v == "")} if isinstance(e, dict) else e
            for e in log
        ]
    return out


# --- the inspection ---------------------------------------------------------------------------


class _Inspection(SubworkflowChecks, MenuChecks):
    """Reads the package files and the workflows; the menu and sub-workflow checks are inherited."""

    # files

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

    def workflow_refs(self, manifest: dict[str, Any]) -> list[WorkflowRef]:
        refs: list[WorkflowRef] = []
        records = manifest.get("workflows") if isinstance(manifest.get("workflows"), list) else []
        for i, rec in enumerate(records):
            if not (isinstance(rec, dict) and all(isinstance(rec.get(k), str) for k in ("id", "workflow", "graph"))):
                continue
            if any(r.id == rec["id"] for r in refs):
                self.error("bmad.json", f"$.workflows[{i}].id", f"workflow id '{rec['id']}' is used twice",
                           "give every workflows[] record its own id")
                continue
            refs.append(WorkflowRef(rec["id"], rec["workflow"], rec["graph"], f"$.workflows[{i}]",
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
        return [WorkflowRef(name, entry["workflow"], entry["graph"], "$.entry", None, description), *refs]

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

    def check_workflow(self, ref: WorkflowRef, agent_ids: set[str] | None) -> WorkflowDocs | None:
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
        index = self._node_index(nodes, file)
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

    def _node_index(self, nodes: list[Any], file: str) -> dict[str, int]:
        """Each node id's position; an id used twice is an error (its first node counts)."""
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
        return index

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


def _first_heading(markdown: str) -> str | None:
    for line in markdown.splitlines():
        if line.startswith("# "):
            return line[2:].strip() or None
    return None
