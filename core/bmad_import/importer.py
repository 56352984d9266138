"""`import_bmad`: read a BMAD tree and produce every file of one v1.1 package plus the report.

The result lives in memory (paths -> contents) so the writer can validate it before anything
reaches the destination.
"""

from __future__ import annotations

import csv
import io
import json
import posixpath
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from crewagent.core.base import safe_yaml

from .agents import ImportedAgent, convert_agent
from .help_catalog import next_steps_file
from .config_map import ConfigKey, ConfigMap, build_config, substitute
from .references import PACKAGE_PREFIX, Resolver, package_alias
from .report import ConfigLine, ImportReport
from .script_files import describe_scripts, is_script_test, script_folder, script_folder_files
from .source import BmadSource, SourceError, is_classic, open_source
from .layouts.customize import load_customizations
from .layouts.customize import report_unused as report_unused_custom
from .layouts.generation import LOOKED_FOR, generation
from .layouts.plans import Planned, plan_workflows
from .layouts.skill_agents import skill_agent
from .layouts.skills import Skill, discover_skills
from .step_files import workflow_files
from .step_workflows import WorkflowPlan

TEXT_SUFFIXES = (".md", ".csv", ".yaml", ".yml", ".xml", ".json", ".txt")
HELP_CATALOG = "_config/bmad-help.csv"  # what an installer merges from the modules' module-help.csv
_SEMVER = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


class BmadImportError(Exception):
    """The import cannot start or cannot produce a valid package; the message says why."""


@dataclass
class ImportResult:
    name: str
    files: dict[str, str | bytes]  # package-relative path -> content
    report: ImportReport


def import_bmad(path: Path, overrides: dict[str, str] | None = None, *, name: str | None = None,
                custom: Path | None = None) -> ImportResult:
    """`custom`: a folder of team `<skill-name>.toml` overrides (an installed `_bmad/custom/` is applied too)."""
    try:
        return _import(open_source(path), path, overrides or {}, name, custom)
    except SourceError as exc:
        raise BmadImportError(str(exc)) from None


def _customised(source: BmadSource, skills: list[Skill], custom_dir: Path | None, report: ImportReport) -> list[Skill]:
    """The skills with their team customisation applied; an agent whose customize.toml is broken is left out
    (reported with the line to fix), as are customisations that name no skill."""
    custom = load_customizations(source, custom_dir, report)
    broken: set[str] = set()
    for skill in skills:
        block = custom.block(source, skill.folder, skill.name, "agent" if skill.kind == "agent" else "workflow", report)
        if block is None and skill.kind == "agent":
            broken.add(skill.name)  # an agent is its customize.toml
        skill.block = block or {}
    kept = [s for s in skills if s.name not in broken]
    report_unused_custom(custom, {s.name for s in kept} | broken, report)
    return kept


def _agents(source: BmadSource, planned: Planned, skills: list[Skill], generated: set[str],
            config: ConfigMap, report: ImportReport) -> list[ImportedAgent]:
    """The `*.agent.yaml` agents, then the skill agents; compiled (markdown) agents are reported, not imported."""
    templates = {p.entry: (p.id, p.template_path) for p in planned.plans}
    agents: list[ImportedAgent] = []
    for rel in sorted(source.agent_files(), key=lambda r: (r.startswith("core/"), r)):
        imported = convert_agent(source, rel, workflows=templates, generated=generated,
                                 values=config.substitutions(), report=report, skills=planned.skill_targets)
        if imported is not None:
            agents.append(imported)
    configs = [f"@pkg/_bmad/{m}/config.yaml" for m in source.modules]
    for skill in (s for s in skills if s.kind == "agent"):
        imported = skill_agent(source, skill, skills=planned.skill_targets, generated=generated,
                               values=config.substitutions(), module_configs=configs, report=report)
        if imported is not None:
            agents.append(imported)
    for rel in source.compiled_agents():
        report.leave_out(rel, "a compiled (markdown) agent; only `*.agent.yaml` agents are imported")
    return agents


def _import(source: BmadSource, path: Path, overrides: dict[str, str], name: str | None,
            custom_dir: Path | None) -> ImportResult:
    config = build_config(source, overrides)
    package_name = name or _default_name(source)
    report = ImportReport(source=path.name or str(path), layout=source.layout, package=package_name,
                          version=_version(source))
    skills = discover_skills(source)
    report.generation = generation(source, skills) or ""
    if not report.generation:
        raise BmadImportError(f"{report.source}: no BMAD agents found; looked for {LOOKED_FOR}")
    skills = _customised(source, skills, custom_dir, report)
    for rel, problem in sorted(source.problems.items()):
        report.leave_out(rel, problem)
    report.config = [ConfigLine(key=c.key, mapped_to=_mapped(c), origin=c.origin, unset=c.kind == "unresolved")
                     for c in config.keys.values()]
    for key in config.unknown_overrides:
        report.warnings.append(f"--set {key}: no module config defines this key; it is used as a plain value")
    generated = {f"{m}/config.yaml" for m in source.modules} | {
        "_config/agent-manifest.csv", "_config/workflow-manifest.csv", "_config/task-manifest.csv"}
    if _module_help(source):
        generated.add(HELP_CATALOG)

    planned = plan_workflows(source, generated, skills, config, report)
    plans, builder = planned.plans, planned.builder
    if not plans:
        raise BmadImportError(f"{report.source}: no workflows found (step-file `workflow.md` + step files, a classic "
                              "`workflow.yaml` + instructions, or skill folders with a `SKILL.md`)")
    agents = _agents(source, planned, skills, generated, config, report)
    if not agents:
        raise BmadImportError(f"{report.source}: no agent could be imported (see the problems above); a package "
                              "needs at least one agent")

    files: dict[str, str | bytes] = {}
    for plan in plans:
        files.update(workflow_files(plan, builder, config, source))
        report.workflows.append(plan.report)
    for agent in agents:
        files.update(agent.files)
    carried = _carry(source, plans, agents, generated, config, report)
    files.update(carried)
    files.update(_generated_files(source, config, plans, agents, report))
    files["agents.json"] = json.dumps({"schemaVersion": "1.1", "agents": [a.doc for a in agents]},
                                      indent=2, ensure_ascii=False) + "\n"
    files["bmad.json"] = json.dumps(_manifest(package_name, report.version, plans, agents), indent=2,
                                    ensure_ascii=False) + "\n"
    _report_refused(source, plans, report)
    used = _used_files(source, plans, generated, report) | _skill_files(source, skills)
    _report_unused(source, plans, planned.classic_failed, used, report)
    files["IMPORT-REPORT.md"] = report.markdown()
    return ImportResult(package_name, files, report)


def _carry(source: BmadSource, plans: list[WorkflowPlan], agents: list[ImportedAgent], generated: set[str],
           config: ConfigMap, report: ImportReport) -> dict[str, str | bytes]:
    """Templates, data, tasks and sidecars the imported texts use, with their references rewritten."""
    nodes = {n.rel for p in plans for n in p.nodes}
    entries = {p.entry for p in plans}
    wanted: set[str] = set()
    for plan in plans:
        wanted |= plan.assets
        folder = posixpath.dirname(plan.entry) + "/"
        wanted |= {f for f in source.files if f.startswith(folder) and not is_classic(f)
                   and not posixpath.basename(f).startswith("step") and not _skill_machinery(f)}
    for agent in agents:
        wanted |= agent.assets
    wanted -= nodes | entries | generated | {rel for p in plans for rel in p.sources}
    queue, done = sorted(wanted), set()
    files: dict[str, str | bytes] = {}
    values = config.substitutions()
    while queue:
        rel = queue.pop(0)
        if rel in done or rel in nodes or rel in generated or not source.exists(rel) or is_script_test(rel):
            continue
        done.add(rel)
        queue += script_folder_files(source, rel)  # a script's helper modules (`config_utils.py`) come along
        data = source.path(rel).read_bytes()
        if rel.endswith(TEXT_SUFFIXES):
            try:
                text = data.decode("utf-8-sig")
            except UnicodeDecodeError:
                files[PACKAGE_PREFIX + rel] = data
                continue
            resolver = Resolver(source, generated, rel, {})
            for ref in resolver.refs(text):
                if ref.kind == "file" and ref.rel not in done and not is_classic(ref.rel):
                    queue.append(ref.rel)
                elif ref.kind == "classic" and ref.rel not in entries and not rel.endswith(".csv"):
                    report.leave_out(f"{ref.rel} (named by {rel})", "classic BMAD workflow; not imported")
                elif ref.kind == "missing":
                    report.warnings.append(f"`{rel}` names `{ref.rel}`, which is not in the BMAD tree; left as written")
            files[PACKAGE_PREFIX + rel] = substitute(resolver.rewrite(text), values)
        else:
            files[PACKAGE_PREFIX + rel] = data
    report.carried = sorted(done)
    report.scripts = describe_scripts(files)
    return files


_MACHINERY = ("customize.toml", "bmad-skill-manifest.yaml")


def _skill_machinery(rel: str) -> bool:
    """Skill files resolved at import (customization, manifests) or only for BMAD's own CI (script tests)."""
    return posixpath.basename(rel) in _MACHINERY or is_script_test(rel)


def _skill_files(source: BmadSource, skills: list[Skill]) -> set[str]:
    """Files of skills the import read and resolved rather than carried."""
    out = {f for f in source.files if f.startswith("custom/") or f in ("config.toml", "config.user.toml")}
    for skill in skills:
        out |= {f"{skill.folder}/{n}" for n in ("SKILL.md", *_MACHINERY)} & source.files
    return out


def _generated_files(source: BmadSource, config: ConfigMap, plans: list[WorkflowPlan], agents: list[ImportedAgent],
                     report: ImportReport) -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = {}
    for module in source.modules:
        files[f"{PACKAGE_PREFIX}{module}/config.yaml"] = config.config_yaml(module)
    files[f"{PACKAGE_PREFIX}_config/agent-manifest.csv"] = _csv(
        ["name", "displayName", "title", "icon", "role", "identity", "communicationStyle", "principles", "module", "path"],
        [[a.doc["id"], a.doc["metadata"]["name"], a.doc["metadata"]["title"], a.doc["metadata"]["icon"],
          a.doc["persona"]["role"], a.doc["persona"]["identity"], a.doc["persona"]["communication_style"],
          _flat(a.doc["persona"]["principles"]), a.doc["metadata"].get("module", ""), "agents.json"] for a in agents])
    files[f"{PACKAGE_PREFIX}_config/workflow-manifest.csv"] = _csv(
        ["name", "description", "module", "path"],
        [[p.id, p.description, p.entry.split("/", 1)[0], f"@pkg/{p.template_path}"] for p in plans])
    helps = _module_help(source)
    if helps:
        header, *rows = source.read(helps[0]).splitlines()
        for rel in helps[1:]:
            rows += source.read(rel).splitlines()[1:]
        files[PACKAGE_PREFIX + HELP_CATALOG] = "\n".join([header, *(r for r in rows if r.strip())]) + "\n"
        files.update(next_steps_file(str(files[PACKAGE_PREFIX + HELP_CATALOG]), PACKAGE_PREFIX + HELP_CATALOG,
                                     plans, agents))
    tasks = sorted(f for f in report.carried if "/tasks/" in f"/{f}")
    files[f"{PACKAGE_PREFIX}_config/task-manifest.csv"] = _csv(
        ["name", "module", "path"], [[posixpath.basename(t).rsplit(".", 1)[0], t.split("/", 1)[0], package_alias(t)]
                                     for t in tasks])
    report.generated = sorted(files)
    return files


def _module_help(source: BmadSource) -> list[str]:
    return [f"{m}/module-help.csv" for m in sorted(source.modules, key=lambda m: (m != "core", m))
            if f"{m}/module-help.csv" in source.files]


def _csv(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows([[" ".join(str(c).split()) for c in row] for row in rows])
    return buf.getvalue()


def _flat(principles: str | list[str]) -> str:
    return " ".join(principles) if isinstance(principles, list) else principles


def _manifest(name: str, version: str, plans: list[WorkflowPlan], agents: list[ImportedAgent]) -> dict:
    menu_targets = [item.get("workflow") or item.get("exec") for a in agents for item in a.doc["menu"]]
    ids = [p.id for p in plans]
    default = next((p for t in menu_targets for p in plans if t in (p.id, p.template_path)), plans[0])
    ordered = [default] + [p for p in plans if p is not default]
    return {
        "schemaVersion": "1.1",
        "name": name,
        "version": version,
        "description": f"Imported from BMAD by crewagent import bmad: {len(agents)} agents, {len(ids)} workflows.",
        "entry": {"workflow": default.template_path, "graph": default.graph_path, "agents": "agents.json"},
        "workflows": [
            {"id": p.id, "displayName": p.display_name, **({"description": p.description} if p.description else {}),
             "workflow": p.template_path, "graph": p.graph_path, "tags": ["bmad", p.entry.split("/", 1)[0]]}
            for p in ordered
        ],
    }


def _report_refused(source: BmadSource, plans: list[WorkflowPlan], report: ImportReport) -> None:
    callers: dict[str, list[str]] = {}
    for plan in plans:
        for rel, node in sorted(plan.refused.items()):
            plan.report.notes.append(f"`{rel}` (named first by `{node}`) is a classic BMAD workflow: not available")
            callers.setdefault(rel, []).append(plan.id)
        for rel, node in sorted(plan.missing.items()):
            report.warnings.append(f"{plan.id}: `{node}` names `{rel}`, which is not in the BMAD tree; left as written")
    imported = {p.entry for p in plans}
    reported = {x.item for x in report.left_out}
    classic = [c for c in source.classic_workflows() if c not in imported and c not in reported]
    for rel in classic:
        offered = callers.pop(rel, [])
        also = f"; offered by steps of {', '.join(offered)}, which say it is not available" if offered else ""
        report.leave_out(rel, "classic BMAD task-style XML workflow with its folder; only step-file workflows and "
                         f"classic workflow.yaml / <workflow> instructions are imported{also}")
    for rel, offered in callers.items():
        report.leave_out(rel, f"classic BMAD workflow named by steps of {', '.join(offered)}; not imported")


def _used_files(source: BmadSource, plans: list[WorkflowPlan], generated: set[str], report: ImportReport) -> set[str]:
    """BMAD files the package holds, replaces or was built from (reported files are not listed again)."""
    return (
        {n.rel for p in plans for n in p.nodes} | {rel for p in plans for rel in p.sources}
        | set(report.carried) | {source.aliases.get(c, c) for c in report.carried}
        | set(source.agent_files()) | set(source.compiled_agents())
        | {source.module_config(m)[0] for m in source.modules} | set(_module_help(source))
        | generated | {"_config/manifest.yaml"}
    )


def _report_unused(source: BmadSource, plans: list[WorkflowPlan], classic_failed: set[str], used: set[str],
                   report: ImportReport) -> None:
    """Every BMAD file that went nowhere, grouped by folder, so nothing disappears without a line."""
    imported = {p.entry for p in plans}
    classic_dirs = [posixpath.dirname(c) + "/" for c in {*source.classic_workflows(), *classic_failed}
                    if c not in imported]
    groups: dict[str, list[str]] = {}
    script_tests: set[str] = set()
    for rel in sorted(source.files - used):
        if any(rel.startswith(d) for d in classic_dirs):
            continue  # reported with its classic workflow
        if is_script_test(rel):
            script_tests.add(script_folder(rel) or "")
            continue
        groups.setdefault(posixpath.dirname(rel) or ".", []).append(posixpath.basename(rel))
    for folder, names in groups.items():
        report.leave_out(f"{folder}/ ({_listed(names)})", "not named by any imported agent or workflow")
    if script_tests:
        folders = f"{len(script_tests)} scripts folder{'s' if len(script_tests) != 1 else ''}"
        report.leave_out(f"tests/ of {folders} ({_listed(sorted(script_tests), 3)})",
                         "tests of BMAD's scripts, run by BMAD's own CI; the scripts are carried without them")


def _listed(names: list[str], first: int = 6) -> str:
    return ", ".join(names[:first]) + (f" and {len(names) - first} more" if len(names) > first else "")


def _mapped(c: ConfigKey) -> str:
    if c.kind == "path":
        return f"`{c.text}` (mount path)"
    if c.kind == "value":
        return f"`{c.text}` (value)"
    return "left as `{" + c.key + "}` (no default; set it with --set " + c.key + "=...)"


def _default_name(source: BmadSource) -> str:
    modules = [m for m in source.modules if m != "core"] or source.modules
    return "-".join(modules)


def _version(source: BmadSource) -> str:
    """The BMAD version: `package.json` beside a source tree, `_config/manifest.yaml` of an installation."""
    candidates: list[object] = []
    for path in (source.root.parent / "package.json", source.root / "package.json"):
        try:
            candidates.append(json.loads(path.read_text(encoding="utf-8")).get("version"))
        except (OSError, ValueError, AttributeError):
            pass
    if "_config/manifest.yaml" in source.files:
        try:
            manifest = safe_yaml.load(source.read("_config/manifest.yaml"))
            candidates.append(manifest.get("installation", {}).get("version"))
        except (yaml.YAMLError, AttributeError):
            pass
    return next((v for v in candidates if isinstance(v, str) and _SEMVER.match(v)), "1.0.0")
