"""Classic BMAD workflows (`workflow.yaml` + instructions, or a `workflow.md` whose body is `<workflow>`
XML) turned into v1.1 graphs a model runs node by node.

The graph: a `start` node that loads the configuration the way BMAD's engine (`core/tasks/workflow.xml`)
does and states the engine's rules, one node per `<step n=…>` in numerical order, a `subworkflow` node
per `<invoke-workflow>` of an imported workflow, and an `end` node. Edges: the next step (the default),
every `goto step`/`goto anchor`/"GOTO step N" (with the `<check if>` around it as the condition), and
`end` for a HALT. A file whose XML is malformed is reported with its line and imported as one step
that follows the whole instructions file, so the workflow stays usable.
"""

from __future__ import annotations

import posixpath
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import yaml

from crewagent.core.base import safe_yaml

from .classic_render import ENGINE_RULES, GOTO_TEXT, MAX_DEPTH, RenderContext, clean, render_step
from .classic_tasks import ENGINE_FILE, TaskInliner
from .classic_vars import WorkflowVariables, resolve_variables
from .classic_xml import ClassicXmlError, Instructions, has_workflow_block, parse_instructions
from .config_map import ConfigMap, substitute
from .references import Resolver
from .report import ImportReport, WorkflowReport
from .source import BmadSource, SourceError
from .step_workflows import Edge, Node, WorkflowBuilder, WorkflowPlan, read_markdown

_HALT_TEXT = re.compile(r"^\s*(?:HALT\b|Exit workflow\b)|\bHALT\s*[-:—]")
_STEP_N = re.compile(r"^(\d+(?:\.\d+)?)([a-z]*)$")
_MD_VARIABLE = re.compile(r"^\s*[-*]\s+`([A-Za-z_][\w-]*)`\s*=\s*`([^`]*)`", re.M)

__all__ = ["classic_identity", "is_classic_workflow_md", "plan_classic_workflow"]


def is_classic_workflow_md(text: str) -> bool:
    """A `workflow.md` whose body is the `<workflow>` XML of classic instructions (v6.1+)."""
    return has_workflow_block(text) and re.search(r"<step\s[^>]*\bn\s*=", text) is not None


def classic_identity(source: BmadSource, rel: str) -> tuple[str, str, str]:
    """(id, display name, description) of a classic workflow; the folder name when it names none."""
    fallback = posixpath.basename(posixpath.dirname(rel)) or "workflow"
    try:
        if rel.endswith((".yaml", ".yml")):
            spec = safe_yaml.load(source.read(rel))
            spec = spec if isinstance(spec, dict) else {}
            heading = ""
        else:
            spec, body, _ = read_markdown(source.read(rel))
            heading = next((ln[2:].strip() for ln in body.splitlines() if ln.startswith("# ")), "")
    except (yaml.YAMLError, OSError, ValueError):
        spec, heading = {}, ""
    wid = re.sub(r"[^A-Za-z0-9._:-]+", "-", str(spec.get("name") or fallback)).strip("-") or fallback
    display = heading or wid.replace("-", " ").title()
    return wid, display, " ".join(str(spec.get("description") or "").split())


def markdown_variables(fm: dict, body: str, source: BmadSource, folder: str) -> dict[str, object]:
    """A v6.1+ `workflow.md` states its variables as frontmatter and "- `name` = `value`" lines before
    the `<workflow>` block; its template is the folder's `template.md` unless one is named."""
    preamble = body.split("<workflow", 1)[0]
    spec: dict[str, object] = {k: v for k, v in fm.items() if k not in ("name", "description")}
    for key, value in _MD_VARIABLE.findall(preamble):
        spec.setdefault(key, value)
    if "template" not in spec and source.exists(f"{folder}/template.md"):
        spec["template"] = "{installed_path}/template.md"
    return spec


@dataclass
class _Step:
    n: str
    node: Node
    elem: ET.Element | None
    gotos: list[tuple[str, str, str | None]] = field(default_factory=list)  # (kind, value, condition)
    calls: list[tuple[ET.Element, str | None]] = field(default_factory=list)
    halts: list[str | None] = field(default_factory=list)
    anchors: list[str] = field(default_factory=list)
    jumps_always: bool = False  # an unconditional goto / HALT at the step's top level


def plan_classic_workflow(source: BmadSource, rel: str, builder: WorkflowBuilder, config: ConfigMap,
                          report: ImportReport) -> WorkflowPlan | None:
    """The plan of the classic workflow at `rel` (`workflow.yaml` or `<workflow>`-XML `workflow.md`),
    or None after saying in `report` why it cannot be imported."""
    wid = builder.entries.get(rel) or classic_identity(source, rel)[0]
    _, display, description = classic_identity(source, rel)
    folder = posixpath.dirname(rel)
    try:
        text = source.read(rel)
    except SourceError as exc:  # not UTF-8, unreadable
        report.leave_out(rel, str(exc))
        return None
    sources = {rel}
    if rel.endswith((".yaml", ".yml")):
        found = _yaml_instructions(source, rel, text, builder, config, report)
        if found is None:
            return None
        variables, body_rel, body_text = found
        sources.add(body_rel)
        full_text = body_text
    else:
        fm, body_text, _ = read_markdown(text)
        variables = resolve_variables(source, markdown_variables(fm, body_text, source, folder), folder, config,
                                      builder.generated)
        body_rel, full_text = rel, text  # parsed whole, so that error lines count the frontmatter too
    wreport = WorkflowReport(id=wid, source=rel, nodes=0, steps=0, classic_from=body_rel)
    plan = WorkflowPlan(wid, rel, display, description, [], wreport, set(variables.assets), {}, {},
                        variables=variables.display, sources=sources)
    resolver = Resolver(source, builder.generated, body_rel, variables.for_resolver)
    try:
        parsed = parse_instructions(full_text, body_rel, markdown=not body_rel.endswith(".xml")) \
            if has_workflow_block(full_text) or body_rel.endswith(".xml") else None
        if parsed is None:
            wreport.notes.append(f"`{body_rel}` has no <workflow> block: imported as one step that follows it")
    except ClassicXmlError as exc:
        report.warnings.append(f"{exc} — `{wid}` is imported as one step that follows the whole instructions file")
        wreport.notes.append(f"malformed XML ({exc.rel}, line {exc.line}): imported as one step")
        parsed = None
    if parsed is not None and not any(c.tag == "step" for c in parsed.root):
        report.leave_out(rel, f"`{body_rel}` has no <step n=…> in its <workflow>: there is nothing to run")
        return None
    preamble = ""
    if parsed is not None:
        preamble = read_markdown(parsed.before)[1] if parsed.before.startswith("---") else parsed.before
        preamble = "\n\n".join(p for p in (preamble.strip(), parsed.after.strip()) if p)
    _Builder(source, builder, config, plan, variables, resolver, TaskInliner(source, resolver, variables, report)
             ).build(parsed, body_text, preamble)
    return plan


def _yaml_instructions(source: BmadSource, rel: str, text: str, builder: WorkflowBuilder, config: ConfigMap,
                       report: ImportReport) -> tuple[WorkflowVariables, str, str] | None:
    """A `workflow.yaml`'s variables, its instructions file and that file's text, or None after saying in
    `report` why not."""
    try:
        spec = safe_yaml.load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f", line {mark.line + 1}" if mark is not None else ""
        report.leave_out(rel, f"not valid YAML{line} ({getattr(exc, 'problem', None) or exc}); fix the YAML "
                         "and import again")
        return None
    if not isinstance(spec, dict):
        report.leave_out(rel, "a classic workflow.yaml must be a mapping (name, instructions, …)")
        return None
    variables = resolve_variables(source, spec, posixpath.dirname(rel), config, builder.generated)
    instructions_rel = variables.file_rel("instructions")
    if instructions_rel is None or not source.exists(instructions_rel):
        report.leave_out(rel, f"its instructions file ({spec.get('instructions') or 'none named'}) is not in the "
                         "BMAD tree")
        return None
    variables.display["instructions"] = "(converted into this workflow's nodes)"
    variables.assets.discard(instructions_rel)
    try:
        return variables, instructions_rel, source.read(instructions_rel)
    except SourceError as exc:
        report.leave_out(rel, str(exc))
        return None


class _Builder:
    def __init__(self, source: BmadSource, builder: WorkflowBuilder, config: ConfigMap, plan: WorkflowPlan,
                 variables: WorkflowVariables, resolver: Resolver, tasks: TaskInliner) -> None:
        self.source, self.builder, self.config, self.plan = source, builder, config, plan
        self.variables, self.resolver, self.tasks = variables, resolver, tasks
        self.values = {**config.substitutions(), **variables.display}
        self.gen = f"gen:workflows/{plan.id}/steps"

    def text(self, raw: str) -> str:
        """References to BMAD files become package paths; `{var}` (and static `{{var}}`) their values.
        The engine and the files this workflow was built from are this graph now, so they are named as such."""
        for ref in self.resolver.refs(raw):
            if ref.rel in self.plan.sources or ref.rel == ENGINE_FILE:
                raw = raw.replace(ref.token, "(this workflow's start node and engine rules)")
            elif ref.kind == "file":
                self.plan.assets.add(ref.rel)
        out = substitute(self.resolver.rewrite(raw), self.values)
        for key, value in self.variables.display.items():
            if "{{" not in value and key != "date":  # {{date}} is the run's, even inside a path
                out = out.replace("{{" + key + "}}", value)
        return out.replace("{project-root}", "@project")

    def build(self, parsed: Instructions | None, body_text: str, preamble: str) -> None:
        plan = self.plan
        start = Node(id="start", rel=f"{self.gen}/start.md", title=f"Start: {plan.display_name}")
        end = Node(id="end", rel=f"{self.gen}/end.md", type="end", title="Finish")
        if parsed is None:
            steps = [_Step("1", Node(id="instructions", rel=f"{self.gen}/instructions.md", title="Follow the "
                                     "instructions"), None)]
            steps[0].node.body = self._wrap(steps[0].node, "## Instructions\n\n" + self.text(body_text), [])
            criticals: list[str] = []
        else:
            criticals = [self.text(clean(c.text)) for c in parsed.root if c.tag in ("critical", "mandate")
                         and clean(c.text)]
            steps = self._steps(parsed.root)
        plan.nodes = [start, *(s.node for s in steps)]
        start.body = self._start_body(preamble, criticals, steps[0].node.id if steps else end.id)
        start.edges.append(Edge(steps[0].node.id if steps else end.id, "begin", default=True))
        calls: list[Node] = []
        entries = self._mode_entries(steps)
        for i, step in enumerate(steps):
            following = steps[i + 1].node.id if i + 1 < len(steps) and steps[i + 1] not in entries else end.id
            self._connect(step, steps, following, end.id, calls)
        for step in steps:
            if step.elem is not None:
                step.node.body = self._wrap(step.node, self._render(step, steps, calls), criticals)
            if len(step.node.edges) >= 2:
                step.node.type = "decision"
                plan.report.decisions.append(step.node.id)
        plan.nodes += calls + [end]
        plan.report.nodes = len(plan.nodes)
        plan.report.steps = len(steps)

    def _steps(self, root: ET.Element) -> list[_Step]:
        elems = [c for c in root if c.tag == "step"]
        taken: set[str] = {"start", "end"}
        steps = []
        for index, elem in enumerate(elems, start=1):
            n = (elem.get("n") or str(index)).strip()
            nid = re.sub(r"[^A-Za-z0-9._:-]+", "-", f"step-{n}")
            while nid in taken:
                nid += "-b"
            taken.add(nid)
            title = elem.get("goal") or elem.get("title") or f"Step {n}"
            step = _Step(n, Node(id=nid, rel=f"{self.gen}/{nid}.md", title=title), elem)
            _scan(elem, [], step, top=True)
            steps.append(step)
        return sorted(steps, key=lambda s: _order(s.n))

    def _mode_entries(self, steps: list[_Step]) -> list[_Step]:
        """Steps only a goto reaches, after a gap in the numbering (sprint-status: 1-5, then 20 and 30 for
        its data and validate modes): the step before one finishes the workflow instead of running into it."""
        targets = {id(t) for s in steps for kind, value, _ in s.gotos if (t := self._find(kind, value, steps, quiet=True))}
        out = []
        for before, step in zip(steps, steps[1:]):
            gap = _order(step.n)[0] - _order(before.n)[0]
            if id(step) in targets and gap > 1 and gap != float("inf"):
                out.append(step)
                self.plan.report.notes.append(f"`{step.node.id}` is reached only by a goto after a gap in the "
                                              f"numbering; `{before.node.id}` finishes instead of running into it")
        return out

    def _find(self, kind: str, value: str, steps: list[_Step], quiet: bool = False) -> _Step | None:
        if kind == "anchor":
            return next((s for s in steps if value in s.anchors), None)
        exact = next((s for s in steps if s.n == value), None)
        if exact is None and (m := _STEP_N.match(value)) and m.group(2):  # "step 2a" where only step 2 exists
            exact = next((s for s in steps if s.n == m.group(1)), None)
            note = f"`goto step {value}` has no step {value}; it goes to step {m.group(1)}"
            if exact is not None and not quiet and note not in self.plan.report.notes:
                self.plan.report.notes.append(note)
        return exact

    def _connect(self, step: _Step, steps: list[_Step], following: str, end_id: str, calls: list[Node]) -> None:
        node = step.node
        edges: list[Edge] = []

        def add(edge: Edge) -> None:
            if edge.to != node.id and all(e.to != edge.to for e in edges):
                edges.append(edge)

        if not step.jumps_always:
            add(Edge(following, "next" if following != end_id else "finish"))
        for kind, value, condition in step.gotos:
            target = self._find(kind, value, steps)
            if target is not None:
                label = f"go to step {target.n}" if kind == "step" else f"go to anchor {value}"
                add(Edge(target.node.id, label, condition=condition))
        for elem, condition in step.calls:
            call = self._call(step, elem, condition, calls)
            if call is not None:
                add(call)
        if step.halts:
            condition = step.halts[0] if len(step.halts) == 1 and step.halts[0] else "a HALT in this step stops the workflow"
            add(Edge(end_id, "halt", condition=condition))
        if not edges:
            edges.append(Edge(following, "next"))
        edges[0].default = True
        node.edges = edges

    def _call(self, step: _Step, elem: ET.Element, condition: str | None, calls: list[Node]) -> Edge | None:
        target = self.call_target(elem)
        if target is None:
            return None
        wid = self.plan.id
        if target == wid or self.builder.reaches(target, wid):
            self.plan.report.notes.append(f"`{step.node.id}` invokes `{target}`, which leads back to `{wid}`; not nested")
            return None
        self.builder.call_graph.setdefault(wid, set()).add(target)
        call_id = f"{step.node.id}.{target}"
        if not any(c.id == call_id for c in calls):
            call = Node(id=call_id, rel=f"gen:workflows/{wid}/calls/{call_id}.md", type="subworkflow",
                        title=f"Run {target}", frontmatter={"subworkflowRef": target})
            call.edges.append(Edge(step.node.id, f"back to {step.node.id}", default=True))
            calls.append(call)
            self.plan.report.calls.append(f"{step.node.id} -> {target}")
        return Edge(call_id, f"run {target}", condition=condition or f"the step invokes {target}")

    def call_target(self, elem: ET.Element) -> str | None:
        written = elem.get("path") or elem.get("workflow") or clean(elem.text)
        for token in [written, *(r.token for r in self.resolver.refs(written))]:
            ref = self.resolver.resolve(token)
            if ref is not None and ref.rel in self.builder.entries:
                return self.builder.entries[ref.rel]
        self.plan.refused.setdefault(written, "invoke-workflow")
        return None

    def _render(self, step: _Step, steps: list[_Step], calls: list[Node]) -> str:
        assert step.elem is not None

        def goto(kind: str, value: str) -> str | None:
            target = self._find(kind, value, steps)
            return target.node.id if target is not None else None

        def call(elem: ET.Element) -> str | None:
            target = self.call_target(elem)
            cid = f"{step.node.id}.{target}"
            return cid if target is not None and any(c.id == cid for c in calls) else None

        ctx = RenderContext(goto, call, self.tasks.task, self.tasks.protocol, self.variables.output_file,
                            current=step.node.id)
        body = render_step(step.elem, ctx)
        self.plan.report.notes.extend(f"`{step.node.id}`: {n}" for n in ctx.notes)
        attrs = []
        if step.elem.get("optional") == "true":
            attrs.append("This step is optional: ask the user whether to include it (in YOLO mode, decide).")
        if step.elem.get("if"):
            attrs.append(f"Run this step only if {step.elem.get('if')}; otherwise move on to the next step.")
        for key in ("for-each", "repeat"):
            if step.elem.get(key):
                attrs.append(f"Repeat this step ({key}: {step.elem.get(key)}).")
        self.plan.assets |= self.tasks.assets
        return "\n".join(f"> {a}" for a in attrs) + ("\n\n" if attrs else "") + self.text(body)

    def _wrap(self, node: Node, body: str, criticals: list[str]) -> str:
        rules = "\n".join(f"- {c}" for c in criticals)
        head = (f"# {node.title}\n\n> **Imported from a classic BMAD workflow** (`{self.plan.entry}`). This node is "
                "one `<step>` of its instructions; when it is done, record it in `stepsCompleted` and move to the "
                "node the step leads to (see allowedNext; the default is the next step).\n\n")
        engine = "## Engine rules\n\n" + ENGINE_RULES + "\n\n"
        workflow_rules = f"## Workflow rules\n\n{rules}\n\n" if rules else ""
        return head + engine + workflow_rules + f"## Step\n\n{body.strip()}\n"

    def _start_body(self, preamble: str, criticals: list[str], first: str) -> str:
        v = self.variables
        rows = "\n".join(f"| `{k}` | {val} |" for k, val in v.display.items() if k not in ("name", "description"))
        init = ("This is an action workflow (no template): it writes no output document of its own."
                if v.template is None else
                f"Template workflow: the output document is `{v.output_file}`. Once its path is known (resolve "
                f"its `{{{{variables}}}}` first), create it from the template `{v.template}` with the placeholders "
                "still in it, creating folders as needed; every template-output then saves into it.")
        parts = [f"# Start: {self.plan.display_name}\n",
                 f"> **Imported from a classic BMAD workflow** (`{self.plan.entry}`).\n",
                 self.plan.description + "\n" if self.plan.description else "",
                 "## Engine rules\n\n" + ENGINE_RULES + "\n",
                 "## Configuration (resolved at import)\n\nThe workflow's variables, as BMAD's engine resolves "
                 "them (`{config_source}:key` from the module config, `{project-root}` = `@project`, "
                 "`{installed_path}` = this workflow's folder in the package). Ask the user for a value "
                 "still shown as `{name}`.\n\n| variable | value |\n|---|---|\n" + rows + "\n"]
        if v.validation:
            parts.append(f"Validation checklist: `{v.validation}` (read it when a step says to validate).\n")
        parts.append("## Initialize output\n\n" + init + "\n")
        if criticals:
            parts.append("## Workflow rules\n\n" + "\n".join(f"- {c}" for c in criticals) + "\n")
        if preamble.strip():
            parts.append("## From the instructions\n\n" + self.text(preamble.strip()) + "\n")
        parts.append(f"## Then\n\nGreet the user in your persona, say what this workflow will do, then record "
                     f"`start` in `stepsCompleted` and move to `{first}`.\n")
        return "\n".join(p for p in parts if p)


def _scan(elem: ET.Element, conds: list[str], step: _Step, top: bool = False, depth: int = 0) -> None:
    if depth >= MAX_DEPTH:
        return
    for child in elem:
        if not isinstance(child.tag, str):
            continue
        mine = conds + ([child.get("if", "")] if child.get("if") else [])
        condition = " and ".join(mine) or None
        text = clean(child.text)
        if child.tag == "goto":
            kind = "anchor" if child.get("anchor") else "step"
            step.gotos.append((kind, child.get(kind, ""), condition))
            step.jumps_always |= top and condition is None
        elif child.tag == "anchor" and child.get("id"):
            step.anchors.append(child.get("id", ""))
        elif child.tag == "invoke-workflow":
            step.calls.append((child, condition))
        elif child.tag in ("action", "output", "critical") and text:
            for match in GOTO_TEXT.finditer(text):
                step.gotos.append(("step", match.group(1).rstrip("."), condition))
                step.jumps_always |= top and condition is None and child.tag == "action"
            if child.tag == "action" and _HALT_TEXT.search(text):
                step.halts.append(condition)
                step.jumps_always |= top and condition is None
        _scan(child, mine, step, depth=depth + 1)


def _order(n: str) -> tuple[float, str]:
    m = _STEP_N.match(n)
    return (float(m.group(1)), m.group(2)) if m else (float("inf"), n)
