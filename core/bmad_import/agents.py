"""BMAD `*.agent.yaml` files turned into `agents.json` entries, menus resolved to imported workflows.

A menu item that names an imported workflow (step-file or classic) runs exactly that workflow (its id,
or the package path of its `workflow.md`); an item whose classic workflow could not be imported stays
in the menu, marked unavailable, and the runtime refuses it with the reason.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from crewagent.core.base import safe_yaml

from .config_map import substitute
from .references import PACKAGE_PREFIX, Resolver, package_alias
from .report import AgentReport, ImportReport, MenuItemReport, MenuStatus
from .source import BmadSource

AGENT_KEYS = ("metadata", "persona", "critical_actions", "prompts", "menu")
PERSONA_KEYS = ("role", "identity", "communication_style", "principles")
METADATA_KEYS = ("name", "title", "icon", "module")
CLASSIC_REASON = "a classic BMAD workflow that could not be imported (the report's Left out section says why)"
SkillTargets = dict[str, "tuple[str, str] | str"]  # skill name or workflow file -> (id, workflow.md path) or why not
_CODE = re.compile(r"^\s*\[([A-Za-z0-9-]{1,8})\]")
_V6_CODE = re.compile(r"^\s*\*?(\S+)\s+or\s+fuzzy\s+match", re.I)


@dataclass
class ImportedAgent:
    doc: dict[str, Any]
    assets: set[str]  # `_bmad/`-relative files its menu and texts reference
    files: dict[str, str] = field(default_factory=dict)  # package files written for it (menu context)


def agent_id(rel: str) -> str:
    return re.sub(r"[^A-Za-z0-9._:-]+", "-", posixpath.basename(rel).removesuffix(".agent.yaml")).strip("-")


def convert_agent(
    source: BmadSource,
    rel: str,
    *,
    workflows: dict[str, tuple[str, str]],  # workflow file -> (id, package workflow.md path)
    generated: set[str],
    values: dict[str, str],
    report: ImportReport,
    skills: SkillTargets | None = None,
) -> ImportedAgent | None:
    agent = _agent_mapping(source, rel, report)
    if agent is None:
        return None
    aid = agent_id(rel)
    resolver = Resolver(source, generated, rel, {})
    assets: set[str] = set()

    def text(value: Any) -> str:
        assets.update(r.rel for r in resolver.refs(str(value)) if r.kind == "file")
        return substitute(resolver.rewrite(str(value)), values).strip()

    entry = AgentReport(id=aid, name=str(agent["metadata"].get("name") or aid), source=rel)
    doc: dict[str, Any] = {
        "id": aid,
        "metadata": _metadata(agent["metadata"], aid, rel, report),
        "persona": _persona(agent["persona"], text, rel, report),
    }
    if agent["metadata"].get("hasSidecar"):
        assets |= _sidecar(source, aid, entry)
    critical = [text(a) for a in agent.get("critical_actions") or [] if str(a).strip()]
    if critical:
        doc["critical_actions"] = critical
    prompts = _prompts(agent.get("prompts") or [], text, rel, report)
    if prompts:
        doc["prompts"] = prompts
    doc["menu"] = []
    for item in agent.get("menu") or []:
        if not isinstance(item, dict) or not item.get("description"):
            report.leave_out(f"{rel}: menu item {item!r:.60}", "a menu item needs a description")
            continue
        converted, line, item_assets = _menu_item(item, resolver, workflows, text, skills or {})
        assets |= item_assets
        doc["menu"].append(converted)
        entry.menu.append(line)
    _report_unknown_keys(agent, rel, report)
    report.agents.append(entry)
    return ImportedAgent(doc, assets)


def _agent_mapping(source: BmadSource, rel: str, report: ImportReport) -> dict[str, Any] | None:
    """The `agent:` mapping of an `*.agent.yaml`, or None after saying in `report` why it is left out."""
    try:
        raw = safe_yaml.load(source.read(rel))
    except yaml.YAMLError as exc:
        report.leave_out(rel, yaml_problem(exc))
        return None
    agent = raw.get("agent") if isinstance(raw, dict) else None
    if not isinstance(agent, dict) or not isinstance(agent.get("metadata"), dict) or not isinstance(agent.get("persona"), dict):
        report.leave_out(rel, "no `agent:` mapping with metadata and persona")
        return None
    return agent


def _report_unknown_keys(agent: dict[str, Any], rel: str, report: ImportReport) -> None:
    for key in agent:
        if key not in AGENT_KEYS:
            report.leave_out(f"{rel}: agent.{key}", "not part of a v1.1 agent")


def _prompts(raw: list[Any], text: Callable[[Any], str], rel: str, report: ImportReport) -> list[dict[str, str]]:
    """The agent's prompts with references rewritten; one without an id or content is left out (and reported)."""
    prompts = []
    for p in raw:
        if isinstance(p, dict) and p.get("id") and p.get("content"):
            prompts.append({"id": str(p["id"]), "content": text(p["content"]),
                            **({"description": str(p["description"])} if p.get("description") else {})})
        else:
            report.leave_out(f"{rel}: prompt {p!r:.60}", "a prompt needs an id and content")
    return prompts


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML error as file-level advice: the line, what the parser says, and what to fix."""
    mark = getattr(exc, "problem_mark", None)
    line = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    what = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return (f"not valid YAML{line}: {what}; fix that line (indentation, a missing `:` or an unclosed quote) "
            "and import again")


def _metadata(meta: dict[str, Any], aid: str, rel: str, report: ImportReport) -> dict[str, Any]:
    out: dict[str, Any] = {k: str(meta[k]) for k in METADATA_KEYS if meta.get(k)}
    out.setdefault("name", aid)
    out.setdefault("title", out["name"])
    out.setdefault("icon", "🤖")
    if meta.get("capabilities"):
        out["description"] = str(meta["capabilities"])
    if meta.get("id"):
        out["sourceId"] = str(meta["id"])
    for key in meta:
        if key not in (*METADATA_KEYS, "capabilities", "id", "hasSidecar"):
            report.leave_out(f"{rel}: metadata.{key}", "no place for it in agents.json metadata")
    return out


def _persona(persona: dict[str, Any], text: Callable[[Any], str], rel: str, report: ImportReport) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in PERSONA_KEYS:
        value = persona.get(key)
        if isinstance(value, list) and any(str(v).strip() for v in value):
            out[key] = [text(v) for v in value if str(v).strip()]
        elif value and not isinstance(value, list):
            out[key] = text(value)
        else:
            out[key] = "(not given in the BMAD agent)"
            report.warnings.append(f"{rel}: persona.{key} is empty; a placeholder was written")
    for key in persona:
        if key not in PERSONA_KEYS:
            report.leave_out(f"{rel}: persona.{key}", "not part of a v1.1 persona")
    return out


def _sidecar(source: BmadSource, aid: str, entry: AgentReport) -> set[str]:
    """An agent's memory folder, carried where an installation puts it (`_memory/<id>-sidecar/`)."""
    folder = f"_memory/{aid}-sidecar/"
    files = {f for f in (*source.aliases, *source.files) if f.startswith(folder)}
    entry.notes.append(f"sidecar memory carried read-only to `{PACKAGE_PREFIX}{folder}` ({len(files)} files); "
                       "items that update it write nothing there (the package is read-only)")
    return files


def _menu_item(
    item: dict[str, Any], resolver: Resolver, workflows: dict[str, tuple[str, str]], text: Callable[[Any], str],
    skills: SkillTargets,
) -> tuple[dict[str, Any], MenuItemReport, set[str]]:
    out: dict[str, Any] = {}
    assets: set[str] = set()
    description = str(item["description"])
    code = _item_code(item)
    status: MenuStatus = "action"
    target, reason = "", ""
    for key, value in item.items():
        if key in ("exec", "workflow", "validate-workflow") and isinstance(value, str):
            out[key], status, target, reason, asset = _handler(key, value, resolver, workflows, skills)
            assets |= {asset} if asset else set()
        elif key in ("data", "tmpl") and isinstance(value, str):
            ref = resolver.resolve(value)
            if ref is not None and ref.kind in ("file", "generated"):
                out[key] = package_alias(ref.rel)
                if ref.kind == "file":
                    assets.add(ref.rel)
            else:
                out[key] = value
        elif key == "action" and isinstance(value, str):
            out[key] = value if value.startswith("#") else text(value)
            if status == "action":
                target = value if value.startswith("#") else _short(value)
                status = "prompt" if value.startswith("#") else "action"
        else:
            out[key] = value
    if status == "unavailable":
        out["unavailable"] = reason  # the router refuses it with this reason; validate knows nothing can be fixed
    return out, MenuItemReport(code=code, description=description, status=status, target=target, reason=reason), assets


def _handler(
    key: str, value: str, resolver: Resolver, workflows: dict[str, tuple[str, str]], skills: SkillTargets
) -> tuple[str, MenuStatus, str, str, str | None]:
    """What an `exec`/`workflow`/`validate-workflow` value becomes in the package: (value, status, target,
    reason it is unavailable, BMAD file to carry along)."""
    if value.startswith("skill:"):
        found = skills.get(value.removeprefix("skill:").strip())
        if isinstance(found, tuple):
            return (found[1] if key == "exec" else found[0]), "workflow", found[0], "", None
        return value, "unavailable", value, found or "no skill of that name is in the BMAD tree", None
    ref = resolver.resolve(value)
    if ref is not None and ref.rel in workflows:
        wid, template = workflows[ref.rel]
        return (template if key == "exec" else wid), "workflow", wid, "", None
    if ref is not None and isinstance(skills.get(ref.rel), str):  # a classic `<workflow>`-XML workflow.md
        return value, "unavailable", value, str(skills[ref.rel]), None
    if ref is not None and ref.kind == "classic":
        reason = CLASSIC_REASON if resolver.source.exists(ref.rel) else "the file it names is not in the BMAD tree"
        return value, "unavailable", value, reason, None
    if ref is not None and ref.kind in ("file", "generated"):
        return package_alias(ref.rel), "action", package_alias(ref.rel), "", ref.rel
    return value, "unavailable", value, "the file it names is not in the BMAD tree", None


def _item_code(item: dict[str, Any]) -> str:
    m = _CODE.match(str(item.get("description", "")))
    if m:
        return m.group(1)
    m = _V6_CODE.match(str(item.get("trigger") or item.get("cmd") or ""))
    return m.group(1) if m else str(item.get("trigger") or item.get("cmd") or "?")


def _short(text: str, limit: int = 60) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
