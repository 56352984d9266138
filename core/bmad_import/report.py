"""The import report: what was imported, how each thing was mapped, and everything left out.

Every decision the importer makes that a team would want to know about lands here, so nothing is
dropped silently. Rendered as `IMPORT-REPORT.md` in the package; the CLI prints a summary of it.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

MenuStatus = Literal["workflow", "action", "prompt", "unavailable"]


class MenuItemReport(BaseModel):
    code: str
    description: str
    status: MenuStatus
    target: str  # the workflow id, the action, or the original reference when unavailable
    reason: str = ""


class AgentReport(BaseModel):
    id: str
    name: str
    source: str
    menu: list[MenuItemReport] = []
    notes: list[str] = []


class WorkflowReport(BaseModel):
    id: str
    source: str
    nodes: int
    steps: int
    decisions: list[str] = []
    calls: list[str] = []  # "node -> workflow"
    resume_nodes: list[str] = []
    notes: list[str] = []
    classic_from: str = ""  # classic workflows: the instructions file its <step>s came from


class LeftOut(BaseModel):
    item: str
    reason: str


class ScriptLine(BaseModel):
    path: str  # `@pkg/_bmad/.../x.py`
    dependencies: list[str] = []  # from its PEP 723 block, installed ahead of runs
    requires_python: str = ""
    problem: str = ""  # why `uv run` would refuse it


class ConfigLine(BaseModel):
    key: str
    mapped_to: str
    origin: str
    unset: bool = False  # no default and no --set: left as `{key}` for the run


class ImportReport(BaseModel):
    source: str
    layout: str
    generation: str = ""  # which BMAD generation the tree is, in words
    package: str
    version: str
    config: list[ConfigLine] = []
    agents: list[AgentReport] = []
    workflows: list[WorkflowReport] = []
    carried: list[str] = []
    scripts: list[ScriptLine] = []  # carried scripts the texts run with `uv run @pkg/...`
    generated: list[str] = []
    left_out: list[LeftOut] = []
    warnings: list[str] = []
    customizations: list[str] = []  # team override files applied

    def leave_out(self, item: str, reason: str) -> None:
        if not any(x.item == item and x.reason == reason for x in self.left_out):
            self.left_out.append(LeftOut(item=item, reason=reason))

    @property
    def menu_items(self) -> int:
        return sum(len(a.menu) for a in self.agents)

    @property
    def unavailable_items(self) -> list[tuple[AgentReport, MenuItemReport]]:
        return [(a, m) for a in self.agents for m in a.menu if m.status == "unavailable"]

    def summary(self) -> str:
        unavailable = len(self.unavailable_items)
        scripts = f" ({len(self.scripts)} script{'s' if len(self.scripts) != 1 else ''})" if self.scripts else ""
        return (
            f"{self.package} {self.version}: {len(self.agents)} agents, {self.menu_items} menu items "
            f"({unavailable} unavailable), {len(self.workflows)} workflows, {len(self.carried)} files carried"
            f"{scripts}, {len(self.left_out)} items left out"
        )

    def markdown(self) -> str:
        out = [
            f"# Import report: {self.package} {self.version}",
            "",
            f"Imported from a BMAD {'source tree' if self.layout == 'source' else 'installation'} "
            f"(`{self.source}`) by `crewagent import bmad`.",
            "",
            *([f"Layout: {self.generation}.", ""] if self.generation else []),
            self.summary() + ".",
            "",
            *(["## Team customizations", "", *(f"- {c}" for c in self.customizations), ""]
              if self.customizations else []),
            "## Configuration",
            "",
            "| key | mapped to | from |",
            "| --- | --- | --- |",
        ]
        out += [f"| `{c.key}` | {c.mapped_to} | {c.origin} |" for c in self.config]
        out += ["", "## Agents", ""]
        for agent in self.agents:
            out += [f"### {agent.name} (`{agent.id}`, from `{agent.source}`)", ""]
            for m in agent.menu:
                reason = f": {m.reason}" if m.reason else ""
                label = _one_line(m.description)
                label = label if label.startswith(f"[{m.code}]") else f"[{m.code}] {label}"
                out.append(f"- {label} — {_status(m)} `{m.target}`{reason}")
            out += [f"- note: {n}" for n in agent.notes]
            out.append("")
        out += ["## Workflows", ""]
        for wf in self.workflows:
            out += _workflow_lines(wf)
        if self.scripts:
            out += ["## Scripts", "", "Carried with their folders; the texts run them as `uv run @pkg/...` with the "
                    "`shell_run` tool where `crewagent.yml` turns commands on. Dependencies are installed ahead of "
                    "runs, so they run without network.", ""]
            out += [f"- `{s.path}`{_script_needs(s)}" for s in self.scripts]
            out.append("")
        out += ["## Left out", ""]
        out += [f"- `{x.item}`: {x.reason}" for x in self.left_out] or ["- nothing"]
        if self.warnings:
            out += ["", "## Warnings", ""] + [f"- {w}" for w in self.warnings]
        out += ["", "## Files", "", f"Carried from the BMAD tree ({len(self.carried)}), under `_bmad/`:", ""]
        out += [f"- `{c}`" for c in self.carried]
        out += ["", f"Generated ({len(self.generated)}):", ""] + [f"- `{g}`" for g in self.generated]
        return "\n".join(out) + "\n"


def _workflow_lines(wf: WorkflowReport) -> list[str]:
    """One workflow's section: how it was built, its decisions, continuations and calls, and its notes."""
    out = [f"### `{wf.id}` (from `{wf.source}`)", ""]
    if wf.classic_from:
        out.append(f"- classic workflow: {wf.steps} `<step>`s of `{wf.classic_from}` as nodes, {wf.nodes} graph "
                   "nodes (with `start`: configuration and engine rules, sub-workflow calls and `end`)")
    else:
        out.append(f"- {wf.steps} step files, {wf.nodes} graph nodes (with the end node and sub-workflow calls)")
    if wf.decisions:
        out.append("- decision nodes: " + ", ".join(f"`{d}`" for d in wf.decisions))
    if wf.resume_nodes:
        out.append("- continuation (resume a started document): " + ", ".join(f"`{r}`" for r in wf.resume_nodes))
    if wf.calls:
        out.append("- sub-workflow calls: " + ", ".join(f"`{c}`" for c in wf.calls))
    out += [f"- {n}" for n in wf.notes]
    return out + [""]


def _status(item: MenuItemReport) -> str:
    return {"workflow": "runs workflow", "action": "inline action", "prompt": "runs prompt",
            "unavailable": "UNAVAILABLE"}[item.status]


def _script_needs(script: ScriptLine) -> str:
    if script.problem:
        return f": {script.problem}"
    needs = [f"Python {script.requires_python}"] if script.requires_python else []
    needs += [f"`{d}`" for d in script.dependencies]
    return f" ({', '.join(needs)})" if needs else ""


def _one_line(text: str) -> str:
    return " ".join(text.split())
