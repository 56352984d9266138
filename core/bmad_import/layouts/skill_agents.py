"""BMAD v6.6+ agents: a skill folder `bmad-agent-*/` with `SKILL.md` and a `customize.toml` `[agent]` table.

The table (with the team's overrides merged) gives the persona, the icon, persistent facts,
activation steps and the menu: `code` becomes the trigger (`CS or fuzzy match on create-story`, as
v6.0 agents wrote it), `skill` the workflow the item starts, `prompt` a prompt of the agent.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from ..agents import ImportedAgent, SkillTargets
from ..config_map import substitute
from ..references import Resolver
from ..report import AgentReport, ImportReport, MenuItemReport
from ..source import BmadSource
from .skills import Skill

_SKILL_CALL = re.compile(r"\b[Ii]nvoke the `(bmad-[\w-]+)` skill")
_SECTION = re.compile(r"^## (\w[^\n]*)\n(.*?)(?=^## |\Z)", re.M | re.S)


def skill_agent(source: BmadSource, skill: Skill, *, skills: SkillTargets, generated: set[str],
                values: dict[str, str], module_configs: list[str], report: ImportReport) -> ImportedAgent | None:
    block = skill.block
    aid = re.sub(r"[^A-Za-z0-9._:-]+", "-", skill.name.removeprefix("bmad-agent-")).strip("-") or skill.name
    resolver = Resolver(source, generated, skill.entry, {"skill-root": "{project-root}/_bmad/" + skill.folder})
    assets: set[str] = set()

    def text(value: Any) -> str:
        value = str(value).replace("{skill-name}", skill.name)
        assets.update(r.rel for r in resolver.refs(value) if r.kind == "file")
        return substitute(resolver.rewrite(value), values).strip()

    name = str(block.get("name") or _heading_name(source, skill) or aid)
    entry = AgentReport(id=aid, name=name, source=f"{skill.folder}/SKILL.md + customize.toml")
    persona = _persona(source, skill, text, report)
    doc: dict[str, Any] = {
        "id": aid,
        "metadata": {"name": name, "title": str(block.get("title") or name), "icon": str(block.get("icon") or "🤖"),
                     "module": _module(source, skill), **({"description": skill.description}
                                                                 if skill.description else {}),
                     "sourceId": skill.name},
        "persona": persona,
    }
    critical = _critical_actions(block, text, module_configs)
    if critical:
        doc["critical_actions"] = critical
    menu, prompts = [], []
    files: dict[str, str] = {}
    for i, item in enumerate(_as_list(block.get("menu"))):
        converted = _menu_item(item, i, skills, text, prompts, entry, skill, report)
        if converted is not None and "prompt-context" in converted:
            path = f"_bmad/_menu/{aid}-{converted['code']}.md"
            files[path] = converted.pop("prompt-context")
            converted["data"] = f"@pkg/{path}"
        if converted is not None:
            converted.pop("code", None)
            menu.append(converted)
    doc["menu"] = menu
    if prompts:
        doc["prompts"] = prompts
    entry.notes.append("persona and menu from `customize.toml` `[agent]`" + (
        " with the team's overrides" if any(c.endswith(f"`{skill.name}`") for c in report.customizations) else ""))
    report.agents.append(entry)
    return ImportedAgent(doc, assets, files)


def _persona(source: BmadSource, skill: Skill, text: Callable[[Any], str], report: ImportReport) -> dict[str, Any]:
    """Role, identity, style and principles from `[agent]`; the SKILL.md's Overview leads the identity."""
    block = skill.block
    persona: dict[str, Any] = {}
    for key in ("role", "identity", "communication_style"):
        persona[key] = text(block[key]) if str(block.get(key) or "").strip() else _missing(skill, key, report)
    principles = [text(p) for p in _as_list(block.get("principles")) if str(p).strip()]
    persona["principles"] = principles or [_missing(skill, "principles", report)]
    overview = _section(source.read(skill.entry), "Overview")
    if overview:
        persona["identity"] = f"{text(overview)}\n\n{persona['identity']}"
    return persona


def _critical_actions(block: dict[str, Any], text: Callable[[Any], str], module_configs: list[str]) -> list[str]:
    """Activation steps before, the persistent facts, where the module configuration is, activation steps after."""
    critical = [text(s) for s in _as_list(block.get("activation_steps_prepend")) if str(s).strip()]
    critical += _facts(block.get("persistent_facts"), text)
    if module_configs:
        critical.append("Use the configuration in " + ", ".join(f"`{c}`" for c in module_configs)
                        + " (user name, languages, artifact folders).")
    critical += [text(s) for s in _as_list(block.get("activation_steps_append")) if str(s).strip()]
    return critical


def _menu_item(item: Any, index: int, skills: SkillTargets, text: Any, prompts: list[dict[str, Any]],
               entry: AgentReport, skill: Skill, report: ImportReport) -> dict[str, Any] | None:
    where = f"{skill.folder}/customize.toml: agent.menu[{index}]"
    if not isinstance(item, dict) or not str(item.get("description") or "").strip():
        report.leave_out(where, "a menu item needs a description")
        return None
    code = re.sub(r"[^A-Za-z0-9-]", "", str(item.get("code") or "")) or f"M{index + 1}"
    description = " ".join(str(item["description"]).split())
    target = str(item.get("skill") or "").strip()
    phrase = target.removeprefix("bmad-") if target else _slug(description)
    out: dict[str, Any] = {"trigger": f"{code} or fuzzy match on {phrase}", "description": f"[{code}] {description}"}
    if target:
        found = skills.get(target)
        if isinstance(found, tuple):
            out["workflow"] = found[0]
            entry.menu.append(MenuItemReport(code=code, description=description, status="workflow", target=found[0]))
        else:
            reason = found or "no skill of that name is in the BMAD tree"
            out.update({"exec": f"skill:{target}", "unavailable": reason})
            entry.menu.append(MenuItemReport(code=code, description=description, status="unavailable",
                                             target=f"skill:{target}", reason=reason))
    elif (called := _SKILL_CALL.search(str(item.get("prompt") or ""))) and isinstance(skills.get(called.group(1)), tuple):
        # "Invoke the `bmad-deep-recon` skill with the market type pre-selected": that workflow, the rest as context
        wid = skills[called.group(1)][0]  # type: ignore[index]
        out.update({"workflow": wid, "code": code.lower(),
                    "prompt-context": f"# {description}\n\nThis menu item starts `{wid}` with this request from "
                                      f"the agent's menu:\n\n{text(item['prompt'])}\n"})
        entry.menu.append(MenuItemReport(code=code, description=description, status="workflow", target=wid,
                                         reason="its prompt invokes that skill; the prompt goes along as context"))
    elif str(item.get("prompt") or "").strip():
        pid = f"menu-{code.lower()}"
        prompts.append({"id": pid, "content": text(item["prompt"]), "description": description})
        out["action"] = f"#{pid}"
        entry.menu.append(MenuItemReport(code=code, description=description, status="prompt", target=f"#{pid}"))
    else:
        report.leave_out(where, "a menu item needs a `skill` or a `prompt`")
        return None
    return out


def _module(source: BmadSource, skill: Skill) -> str:
    first = skill.folder.split("/", 1)[0]
    return first if first in source.modules else next((m for m in source.modules if m != "core"), first)


def _facts(facts: Any, text: Any) -> list[str]:
    """`file:` globs are project files the agent reads when it starts; other entries are facts as written."""
    out = []
    for fact in _as_list(facts):
        fact = str(fact).strip()
        if fact.startswith("file:"):
            pattern = fact[5:].strip().replace("{project-root}/", "").replace("{project-root}", "")
            out.append(f"Before anything else, read the project files matching `@project/{pattern}` (fs_search / "
                       "fs_read) when any exist, and keep their contents as standing facts for the session.")
        elif fact:
            out.append(f"Standing fact: {text(fact)}")
    return out


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else ([] if value in (None, "") else [value])


def _section(text: str, title: str) -> str:
    for match in _SECTION.finditer(text):
        if match.group(1).strip().lower() == title.lower():
            return match.group(2).strip()
    return ""


def _heading_name(source: BmadSource, skill: Skill) -> str:
    heading = next((ln[2:] for ln in source.read(skill.entry).splitlines() if ln.startswith("# ")), "")
    return heading.split("—")[0].split(" - ")[0].strip()


def _missing(skill: Skill, key: str, report: ImportReport) -> str:
    report.warnings.append(f"{skill.folder}/customize.toml: agent.{key} is empty; a placeholder was written")
    return "(not given in the BMAD agent)"


def _slug(text: str) -> str:
    return "-".join(re.findall(r"[a-z0-9]+", text.lower())[:4]) or "item"
