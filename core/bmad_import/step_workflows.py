"""BMAD step-file workflows (`workflow*.md` + `steps*/step-*.md`) turned into v1.1 graphs.

One graph node per file: the workflow file itself is the entry node (it loads the configuration and
routes to the first step), every step file reached from it is a node, and an `end` node is added.
Edges come from the files' own references (`nextStepFile`, `continueStepFile`, `./step-02.md` in
the body); file order is only the fallback for a step that names no successor. A continuation file
(`step-01b-continue`) resumes a started document, so it may go to any later step. A step that offers
another step-file workflow (Party Mode, "run workflow X") gets a `subworkflow` node that runs it and
comes back; classic `workflow.xml` / `workflow.yaml` targets are refused and reported.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from crewagent.core.base import safe_yaml
from crewagent.core.base.frontmatter import FrontmatterError
from crewagent.core.base.frontmatter import parse as parse_frontmatter

from .references import PACKAGE_PREFIX, Ref, Resolver
from .report import WorkflowReport
from .source import BmadSource

V11_KEYS = ("schemaVersion", "nodeId", "type", "title", "agentId", "inputs", "outputs", "setsVariables", "transitions")
_CONTINUATION = re.compile(r"\d+[a-z]?-(?:continue|resume)\b", re.I)  # step-01b-continue
_SKILL_CALL = re.compile(r"\b(?:[Ii]nvoke|[Rr]un|[Uu]se|[Ll]oad) the `(bmad-[\w-]+)` skill")
_STEP_NUMBER = re.compile(r"^step-(?:[a-z]-)?\d+[a-z]?-")
_KEY_LABELS = {"nextStep": "next", "nextStepFile": "next", "continueStepFile": "resume", "altStepFile": "alternative",
               "skipToStepFile": "skip ahead"}


@dataclass
class Edge:
    to: str
    label: str
    default: bool = False
    condition: str | None = None

    def graph(self, src: str) -> dict[str, Any]:
        doc: dict[str, Any] = {"from": src, "to": self.to, "label": self.label, "isDefault": self.default}
        if self.condition:
            doc["conditionText"] = self.condition
        return doc


@dataclass
class Node:
    id: str
    rel: str  # `_bmad/`-relative source file; generated nodes use their package path with `gen:` prefix
    type: str = "step"
    title: str = ""
    frontmatter: dict[str, Any] = field(default_factory=dict)
    body: str = ""
    edges: list[Edge] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # workflow ids this step offers to run
    handoffs: list[str] = field(default_factory=list)  # offered workflows not nested: they call back
    refused: list[str] = field(default_factory=list)  # classic targets this step names
    mentions: list[str] = field(default_factory=list)  # step files named in the text, in order

    @property
    def package_path(self) -> str:
        return self.rel[4:] if self.rel.startswith("gen:") else PACKAGE_PREFIX + self.rel


@dataclass
class WorkflowPlan:
    id: str
    entry: str  # `_bmad/`-relative workflow file
    display_name: str
    description: str
    nodes: list[Node]
    report: WorkflowReport
    assets: set[str]  # `_bmad/`-relative files its nodes reference
    refused: dict[str, str]  # classic target -> first node naming it
    missing: dict[str, str]  # missing target -> node
    variables: dict[str, str] = field(default_factory=dict)  # classic workflows: resolved workflow.yaml variables
    sources: set[str] = field(default_factory=set)  # classic workflows: BMAD files turned into its nodes

    @property
    def template_path(self) -> str:
        return f"workflows/{self.id}/workflow.md"

    @property
    def graph_path(self) -> str:
        return f"workflows/{self.id}/workflow.graph.json"

    def graph(self) -> dict[str, Any]:
        return {
            "schemaVersion": "1.1",
            "entryNodeId": self.nodes[0].id,
            "nodes": [{"id": n.id, "type": n.type, "file": n.package_path, **({"title": n.title} if n.title else {})}
                      for n in self.nodes],
            "edges": [e.graph(n.id) for n in self.nodes for e in n.edges],
            "metadata": {"importedFrom": self.entry},
        }


def read_markdown(text: str) -> tuple[dict[str, Any], str, str | None]:
    """(frontmatter, body, problem). BMAD files may lack frontmatter or carry slightly broken YAML."""
    if not text.startswith("---"):
        return {}, text, None
    try:
        fm, body = parse_frontmatter(text)
        return fm, body, None
    except FrontmatterError as exc:
        head, _, rest = text[3:].partition("\n---")
        repaired = head.replace("\\'", "''")
        try:
            fm = safe_yaml.load(repaired)
            if isinstance(fm, dict):
                return fm, rest.partition("\n")[2], "frontmatter YAML repaired (backslash-escaped quote)"
        except yaml.YAMLError:
            pass
        return {}, text, f"frontmatter is not valid YAML ({exc.message}); kept as body text"


def workflow_identity(source: BmadSource, rel: str) -> tuple[str, str, str]:
    """(id, display name, description) of a workflow file, from its frontmatter."""
    fm, body, _ = read_markdown(source.read(rel))
    stem = posixpath.basename(rel)[:-3]
    fallback = posixpath.basename(posixpath.dirname(rel)) if stem == "workflow" else stem.removeprefix("workflow-")
    wid = str(fm.get("name") or fallback).strip()
    wid = re.sub(r"[^A-Za-z0-9._:-]+", "-", wid).strip("-") or fallback
    heading = next((ln[2:].strip() for ln in body.splitlines() if ln.startswith("# ")), "")
    return wid, heading or wid, str(fm.get("description") or "").strip()


class WorkflowBuilder:
    """Builds the plans of one import; `entries` maps every imported workflow file to its id, and the
    calls nested so far are kept so no two workflows end up nesting each other."""

    def __init__(self, source: BmadSource, generated: set[str], entries: dict[str, str],
                 first_steps: dict[str, str]) -> None:
        self.source = source
        self.generated = generated
        self.entries = entries
        self.first_steps = first_steps  # first step file -> workflow id
        self.call_graph: dict[str, set[str]] = {}  # workflow id -> workflows it nests, across all plans
        self.skill_ids: dict[str, str] = {}  # skill name -> workflow id (v6.1+: "Invoke the `bmad-x` skill")

    def reaches(self, start: str, goal: str) -> bool:
        """Whether workflow `start` nests `goal`, directly or through others (nesting both ways never ends)."""
        seen, stack = set(), [start]
        while stack:
            current = stack.pop()
            if current == goal:
                return True
            if current not in seen:
                seen.add(current)
                stack.extend(self.call_graph.get(current, ()))
        return False

    def resolver(self, rel: str, fm: dict[str, Any], entry: str) -> Resolver:
        variables = {k: v for k, v in fm.items() if isinstance(v, str)}
        folder = posixpath.dirname(entry)
        variables.setdefault("installed_path", "{project-root}/_bmad/" + folder)
        if self.source.exists(f"{folder}/SKILL.md"):  # a skill's own placeholders (v6.1+)
            variables.setdefault("skill-root", "{project-root}/_bmad/" + folder)
            variables.setdefault("skill-name", posixpath.basename(folder))
        return Resolver(self.source, self.generated, rel, variables)

    def first_step(self, entry: str) -> str | None:
        fm, body, _ = read_markdown(self.source.read(entry))
        resolver = self.resolver(entry, fm, entry)
        for ref in self._step_refs(resolver, fm, body, entry):
            return ref.rel
        return None

    def _step_refs(self, resolver: Resolver, fm: dict[str, Any], body: str, entry: str) -> list[Ref]:
        refs = [r for v in fm.values() if isinstance(v, str) for r in resolver.refs(v)] + resolver.refs(body)
        out = []
        for ref in refs:
            if ref.kind == "missing" and _is_step_name(ref.rel):
                ref = self.near_step(ref, entry) or ref
            if ref.kind == "file" and _is_step_name(ref.rel):
                out.append(ref)
        return out

    def near_step(self, ref: Ref, entry: str) -> Ref | None:
        """A step file named where it is not: `./step-01-x.md` written in a workflow file whose steps
        live in `steps/`, or a renamed step (`step-02-customer-insights.md` for the folder's only
        `step-02-*.md`). Found only when exactly one file fits."""
        base = posixpath.dirname(entry) + "/"
        name = posixpath.basename(ref.rel)
        hits = [f for f in self.source.files if f.startswith(base) and posixpath.basename(f) == name]
        if len(hits) != 1:
            number = _STEP_NUMBER.match(name)
            folder = posixpath.dirname(ref.rel)
            hits = [f for f in self.source.files if number and posixpath.dirname(f) == folder
                    and posixpath.basename(f).startswith(number.group(0))]
        return Ref(ref.token, hits[0], "file") if len(hits) == 1 else None

    def build(self, entry: str) -> WorkflowPlan:
        wid, display, description = workflow_identity(self.source, entry)
        wid = self.entries.get(entry, wid)
        walk = _Walk(self, wid, entry, WorkflowReport(id=wid, source=entry, nodes=0, steps=0))
        walk.run([entry])
        if walk.step_dir is not None:
            unnamed = sorted(f for f in self.source.files if posixpath.dirname(f) == walk.step_dir
                             and _is_step_name(f) and f not in walk.nodes)
            for rel in unnamed:
                walk.report.notes.append(f"`{posixpath.basename(rel)}` is named by no step; kept as a node "
                                         "reached by file order")
            walk.run(unnamed)
        plan_nodes = [walk.nodes[entry]] + sorted((n for r, n in walk.nodes.items() if r != entry), key=lambda n: n.rel)
        walk.report.steps = len(plan_nodes) - 1
        self._connect(wid, plan_nodes, walk.report)
        walk.report.nodes = len(plan_nodes)
        return WorkflowPlan(wid, entry, display, description, plan_nodes, walk.report, walk.assets, walk.refused,
                            walk.missing)

    def _connect(self, wid: str, nodes: list[Node], report: WorkflowReport) -> None:
        by_rel = {n.rel: n for n in nodes}
        steps = nodes[1:]
        end = Node(id=_free_id("end", {n.id for n in nodes}), rel=f"gen:workflows/{wid}/steps/end.md", type="end",
                   title="Finish")
        for i, node in enumerate(nodes):
            labels = _key_labels(node.frontmatter, node.rel, self.source)
            resume = _CONTINUATION.search(node.id) is not None and node is not nodes[0]
            for rel in [] if resume else node.mentions:
                target = by_rel[rel]
                label = "resume" if _CONTINUATION.search(target.id) else labels.get(rel) or _label_for(target)
                if not any(e.to == target.id for e in node.edges):
                    condition = "a started document exists (resume it)" if label == "resume" else None
                    node.edges.append(Edge(target.id, label, condition=condition))
            if resume:  # a continuation file picks the step after the last one the document records
                report.resume_nodes.append(node.id)
                later = [s for s in steps if s.rel > node.rel and not _CONTINUATION.search(s.id)]
                for s in later:
                    node.edges.append(Edge(s.id, f"resume at {s.id}",
                                           condition=f"the started document's stepsCompleted says {s.id} is next"))
                if not later:
                    node.edges.append(Edge(end.id, "finish"))
            position = {n.id: k for k, n in enumerate(nodes)}
            if node.edges and all(position[e.to] <= position[node.id] for e in node.edges):
                node.edges.append(Edge(end.id, "finish"))  # it only offers to go back: it may also finish
            if not node.edges:
                following = steps[steps.index(node) + 1:] if node in steps else []
                following = [s for s in following if not _CONTINUATION.search(s.id)]
                if node is nodes[0] or not following or _looks_final(node):
                    node.edges.append(Edge(end.id, "finish"))
                else:
                    node.edges.append(Edge(following[0].id, "next"))
                    report.notes.append(f"`{node.id}` names no next step; it continues to `{following[0].id}` "
                                        "(file order)")
            _pick_default(node, position, end.id)
            if len(node.edges) >= 2:
                _mark_decision(node, nodes, report)
        nodes.extend(self._nested_calls(wid, nodes, report))
        nodes.append(end)

    def _nested_calls(self, wid: str, nodes: list[Node], report: WorkflowReport) -> list[Node]:
        """A sub-workflow node for each workflow a step offers to run, unless it leads back to `wid`
        (then the step only suggests starting it next)."""
        calls: list[Node] = []
        for node in nodes:
            for target in list(node.calls):
                if self.reaches(target, wid):  # nesting it would let the two call each other forever
                    node.calls.remove(target)
                    node.handoffs.append(target)
                    report.notes.append(f"`{node.id}` offers `{target}`, which leads back to `{wid}`; it is not "
                                        "nested (that run would never end): the step suggests starting it next")
                    continue
                self.call_graph.setdefault(wid, set()).add(target)
                call = Node(id=_free_id(f"{node.id}.{target}", {n.id for n in nodes + calls}),
                            rel=f"gen:workflows/{wid}/calls/{node.id}.{target}.md", type="subworkflow",
                            title=f"Run {target}")
                call.frontmatter = {"subworkflowRef": target}
                call.edges.append(Edge(node.id, f"back to {node.id}", default=True))
                node.edges.append(Edge(call.id, f"run {target}",
                                       condition=f"the user picks the option that runs {target}"))
                calls.append(call)
                report.calls.append(f"{node.id} -> {target}")
        return calls


def _mark_decision(node: Node, nodes: list[Node], report: WorkflowReport) -> None:
    """A step with several ways on is a decision; each edge gets the step's own words for it (e.g. its
    numbered menu line) when it has no condition yet."""
    node.type = "decision"
    report.decisions.append(node.id)
    for edge in node.edges:
        target = next((n for n in nodes if n.id == edge.to), None)
        line = _line_naming(node.body, target.rel) if target is not None else None
        if edge.condition is None and line:
            edge.condition = f"the step says: {line}"


@dataclass
class _Walk:
    """Reads a workflow's files breadth-first from its entry and sorts every reference they make."""

    builder: WorkflowBuilder
    wid: str
    entry: str
    report: WorkflowReport
    nodes: dict[str, Node] = field(default_factory=dict)
    assets: set[str] = field(default_factory=set)
    refused: dict[str, str] = field(default_factory=dict)  # classic target -> first node naming it
    missing: dict[str, str] = field(default_factory=dict)  # missing target -> node
    step_dir: str | None = None

    def run(self, queue: list[str]) -> None:
        queue = list(queue)
        while queue:
            rel = queue.pop(0)
            if rel not in self.nodes:
                queue += self.visit(rel)

    def visit(self, rel: str) -> list[str]:
        """Add `rel` as a node; returns the step files it names."""
        fm, body, problem = read_markdown(self.builder.source.read(rel))
        if problem:
            self.report.notes.append(f"`{rel}`: {problem}")
        node = Node(id=_node_id(rel, {n.id for n in self.nodes.values()}), rel=rel, frontmatter=fm, body=body,
                    title=_title(body, fm))
        self.nodes[rel] = node
        resolver = self.builder.resolver(rel, fm, self.entry)
        refs = [r for v in fm.values() if isinstance(v, str) for r in resolver.refs(v)] + resolver.refs(body)
        for ref in refs:
            if ref.kind == "missing" and _is_step_name(ref.rel):
                ref = self.near_step(node, ref)
            if ref.rel in (rel, self.entry):
                continue
            target_wf = self.builder.entries.get(ref.rel) or self.builder.first_steps.get(ref.rel)
            if target_wf is not None and target_wf != self.wid:
                if target_wf not in node.calls:
                    node.calls.append(target_wf)
            elif ref.kind == "classic":
                self.refused.setdefault(ref.rel, node.id)
                if ref.rel not in node.refused:
                    node.refused.append(ref.rel)
            elif ref.kind == "file" and _is_step_name(ref.rel):
                self.step_dir = self.step_dir or posixpath.dirname(ref.rel)
                if ref.rel not in node.mentions:
                    node.mentions.append(ref.rel)
            elif ref.kind == "file":
                self.assets.add(ref.rel)
            elif ref.kind == "missing":
                self.missing.setdefault(ref.rel, node.id)
        for name in _SKILL_CALL.findall(body):  # a skill offered by name runs as a sub-workflow, like a file
            target_wf = self.builder.skill_ids.get(name)
            if target_wf is not None and target_wf != self.wid and target_wf not in node.calls:
                node.calls.append(target_wf)
        return list(node.mentions)

    def near_step(self, node: Node, ref: Ref) -> Ref:
        near = self.builder.near_step(ref, self.entry)
        if near is None:
            return ref
        if posixpath.basename(near.rel) != posixpath.basename(ref.rel):
            self.report.notes.append(f"`{node.id}` names `{posixpath.basename(ref.rel)}`, which does not exist; "
                                     f"linked to `{posixpath.basename(near.rel)}`, the only step with that number")
        return near


def _is_step_name(rel: str) -> bool:
    return posixpath.basename(rel).startswith("step") and rel.endswith(".md")


def _node_id(rel: str, taken: set[str]) -> str:
    stem = posixpath.basename(rel)[:-3]
    stem = "skill" if stem == "SKILL" else stem  # a skill's own file (v6.1+)
    return _free_id(re.sub(r"[^A-Za-z0-9._:-]+", "-", stem).strip("-") or "step", taken)


def _free_id(base: str, taken: set[str]) -> str:
    candidate, n = base, 2
    while candidate in taken:
        candidate, n = f"{base}-{n}", n + 1
    return candidate


def _title(body: str, fm: dict[str, Any]) -> str:
    heading = next((ln.lstrip("#").strip() for ln in body.splitlines() if ln.startswith("# ")), "")
    return heading or str(fm.get("name") or "").strip()


def _label_for(target: Node) -> str:
    stem = _STEP_NUMBER.sub("", target.id)
    return stem.replace("-", " ") or target.id


def _key_labels(fm: dict[str, Any], rel: str, source: BmadSource) -> dict[str, str]:
    """Frontmatter keys name the transitions: `nextStepFile` -> next, `nextStepFile_modeA` -> mode A."""
    out: dict[str, str] = {}
    resolver = Resolver(source, set(), rel, {k: v for k, v in fm.items() if isinstance(v, str)})
    for key, value in fm.items():
        if not isinstance(value, str):
            continue
        ref = resolver.resolve(value)
        if ref is None:
            continue
        label = _KEY_LABELS.get(key)
        if label is None:
            suffix = key.split("_", 1)[1] if "_" in key else key
            label = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", suffix).replace("mode", "mode ").strip().lower()
            label = re.sub(r"\s+", " ", label)
        out.setdefault(ref.rel, label)
    return out


def _line_naming(body: str, rel: str) -> str | None:
    name = posixpath.basename(rel)
    line = next((ln for ln in body.splitlines() if name in ln), None)
    if line is None:
        return None
    text = " ".join(line.replace("*", "").replace("`", "").split()).lstrip("- ")
    return text if len(text) <= 140 else text[:139] + "…"


def _looks_final(node: Node) -> bool:
    return bool(re.search(r"complete|final|finish|wrap|exit", node.id, re.I))


def _pick_default(node: Node, position: dict[str, int], end_id: str) -> None:
    """The main path: `next`, else a forward step that is not a side branch, else finishing."""
    if not node.edges:
        return
    here = position.get(node.id, 0)

    def rank(edge: Edge) -> tuple[int, int]:
        if edge.label == "next":
            return 0, 0
        if edge.to == end_id:
            return 3, 0
        where = position.get(edge.to, 0)
        if where <= here:
            return 4, where
        side = edge.label in ("alternative", "skip ahead", "resume") or edge.label.startswith("resume at")
        return (2 if side else 1), where

    preferred = min(node.edges, key=rank)
    for edge in node.edges:
        edge.default = edge is preferred
