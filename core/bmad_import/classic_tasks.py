"""`<invoke-task>` and `<invoke-protocol>` carried into a node as instructions the model can follow.

A task file the BMAD tree has is inlined (its text, references rewritten); a protocol such as
`discover_inputs` is taken from the engine's `<protocols>` section in `core/tasks/workflow.xml` and
rendered with the workflow's own `input_file_patterns`. The model has no BMAD engine to call.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from .classic_render import RenderContext, clean, render
from .classic_vars import WorkflowVariables
from .classic_xml import ClassicXmlError, parse_fragment
from .references import Resolver
from .report import ImportReport
from .source import BmadSource

ENGINE_FILE = "core/tasks/workflow.xml"
INLINE_LIMIT = 16_000  # characters of a task file inlined into a node; a longer one is named instead

DISCOVER_INPUTS_FALLBACK = """\
For each input pattern below: look for the sharded version first (a folder of `.md` files; load
every file, `index.md` first, or only the shard the workflow needs for SELECTIVE_LOAD, or the
files `index.md` points at for INDEX_GUIDED); if none, the whole document(s) matching the `whole`
pattern, read completely. Keep what you loaded as `{name}_content`. A pattern with no match is
not an error: note "No {name} files found". Finish by listing what was loaded from which files."""


class TaskInliner:
    def __init__(self, source: BmadSource, resolver: Resolver, variables: WorkflowVariables,
                 report: ImportReport) -> None:
        self.source, self.resolver, self.variables, self.report = source, resolver, variables, report
        self.assets: set[str] = set()
        self._protocols: dict[str, ET.Element] | None = None

    def task(self, elem: ET.Element) -> str:
        written = clean(elem.text) or elem.get("path", "")
        refs = [r for r in self.resolver.refs(written) if r.rel.endswith((".xml", ".md"))]
        if elem.get("path"):
            ref = self.resolver.resolve(elem.get("path", ""))
            refs = ([ref] if ref is not None else []) + refs
        tasks = [r for r in refs if "/tasks/" in f"/{r.rel}" or r.rel.endswith(".xml")]
        for ref in tasks:
            if self.source.exists(ref.rel):
                text = self.source.read(ref.rel)
                if len(text) > INLINE_LIMIT:
                    self.assets.add(ref.rel)
                    return f"{written}\n(Read the task file `{ref.rel}` completely and follow it.)"
                return (f"{written}\n\nThe task `{ref.rel}`, to follow here:\n\n```xml\n"
                        f"{self.resolver.rewrite(text).strip()}\n```")
            self.report.warnings.append(f"`{self.resolver.base_dir}`: an invoke-task names `{ref.rel}`, which is "
                                        "not in the BMAD tree; the node asks the model to do what the line says")
            return f"{written}\n(The task file is not available here: do what this line says yourself.)"
        return written

    def protocol(self, name: str) -> str:
        patterns = self._patterns()
        elem = self._engine_protocols().get(name)
        if elem is None:
            body = DISCOVER_INPUTS_FALLBACK if name == "discover_inputs" else (
                f"(The `{name}` protocol is not in the BMAD tree; do what its name says.)")
        else:
            ctx = RenderContext(lambda k, v: None, lambda e: None, self.task, lambda n: "",
                                self.variables.output_file)
            lines: list[str] = []
            for child in elem:
                lines += render(child, 0, ctx)
            body = "\n".join(lines)
        return body + ("\n\nThis workflow's input_file_patterns:\n" + patterns if patterns else "")

    def _patterns(self) -> str:
        lines = []
        for name, entry in self.variables.patterns.items():
            parts = ", ".join(f"{k}: `{v}`" for k, v in entry.items())
            lines.append(f"- `{name}` ({parts})")
        return "\n".join(lines)

    def _engine_protocols(self) -> dict[str, ET.Element]:
        if self._protocols is None:
            self._protocols = {}
            if self.source.exists(ENGINE_FILE):
                try:
                    root = parse_fragment(self.source.read(ENGINE_FILE), ENGINE_FILE)
                except ClassicXmlError as exc:
                    self.report.warnings.append(str(exc))
                    return self._protocols
                for proto in root.iter("protocol"):
                    if proto.get("name"):
                        self._protocols[proto.get("name", "")] = proto
        return self._protocols
