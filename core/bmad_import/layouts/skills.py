"""BMAD skills (v6.1+): a folder with a `SKILL.md`. What each one is, and its text made runnable here.

A skill is one of: an agent (v6.6+: `customize.toml` with an `[agent]` table); a step-file workflow
(`workflow.md` with step files, or a `SKILL.md` whose own text names step files); a classic
workflow (a `workflow.md` whose body is `<workflow>` XML); or one `SKILL.md` (+ `references/`,
templates, data) that becomes a workflow whose only step is that file. Skill texts first run
scripts that resolve their customization and config (`uv run …/resolve_customization.py`): those
are resolved at import time and the results written into the text. Their other scripts are carried
(see script_files.py) and run with `uv run @pkg/…` where the bot has the `shell_run` tool.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from ..classic import is_classic_workflow_md
from ..source import BmadSource
from ..step_workflows import read_markdown

SkillKind = Literal["agent", "workflow", "classic", "single"]
_RESOLVE_CUSTOM = re.compile(r"(?:Run:\s*)?`?uv run [^`\n]*resolve_customization\.py[^`\n]*?--key\s+([\w.]+)[^`\n]*`?")
_RESOLVE_CONFIG = re.compile(r"`?uv run [^`\n]*resolve_config\.py[^`\n]*`?")
_IF_FAILS = re.compile(r"\*\*If the script fails\*\*.*?Any missing file is skipped\.[^\n]*\n", re.S)
_ON_FAILURE = re.compile(r"\s*On failure,[^.\n]*(?:\.[^.\n]*?defaults)?\.")
_BLOCK_REF = re.compile(r"\{(agent|workflow)\.([A-Za-z0-9_.]+)\}")
SCRIPTS_NOTE = ("> Scripts named here (`uv run @pkg/…`) run with the `shell_run` tool; their dependencies are installed "
                "ahead of time. Without that tool, or when a script fails, do its work yourself with the file tools, "
                "or tell the user it needs a shell and go on without it.")


@dataclass
class Skill:
    name: str
    folder: str  # `_bmad/`-relative
    kind: SkillKind
    entry: str  # the file the workflow starts from (`workflow.md` or `SKILL.md`)
    description: str = ""
    block: dict[str, Any] = field(default_factory=dict)  # the merged customize.toml table ([agent] / [workflow])

    @property
    def workflow_id(self) -> str:
        return self.name.removeprefix("bmad-") or self.name


def discover_skills(source: BmadSource) -> list[Skill]:
    skills: list[Skill] = []
    for folder in source.skill_dirs():
        fm, _, _ = read_markdown(source.read(f"{folder}/SKILL.md"))
        name = str(fm.get("name") or posixpath.basename(folder)).strip()
        description = " ".join(str(fm.get("description") or "").split())
        if _has_agent_block(source, folder) or (name.startswith("bmad-agent-") and not _workflow_md(source, folder)):
            skills.append(Skill(name, folder, "agent", f"{folder}/SKILL.md", description))
            continue
        entry = _workflow_md(source, folder) or f"{folder}/SKILL.md"
        kind: SkillKind = "classic" if entry.endswith("workflow.md") and is_classic_workflow_md(source.read(entry)) else (
            "workflow" if entry.endswith("workflow.md") or _names_steps(source, folder) else "single")
        skills.append(Skill(name, folder, kind, entry, description))
    return skills


def _workflow_md(source: BmadSource, folder: str) -> str | None:
    rel = f"{folder}/workflow.md"
    return rel if source.exists(rel) else None


def _names_steps(source: BmadSource, folder: str) -> bool:
    return any(f.startswith(folder + "/") and posixpath.basename(f).startswith("step-") for f in source.files)


def _has_agent_block(source: BmadSource, folder: str) -> bool:
    rel = f"{folder}/customize.toml"
    return source.exists(rel) and re.search(r"^\[agent\]", source.read(rel), re.M) is not None


def resolve_activation(text: str, skill: Skill, block_name: str, config_files: list[str]) -> str:
    """The skill's text with its activation made runnable: customization and config already resolved."""
    block = skill.block

    def custom(match: re.Match[str]) -> str:
        key = match.group(1)
        if key == block_name:
            return (f"The `{block_name}` values were resolved at import: they are listed under \"Customization "
                    "(resolved at import)\" at the end of this file")
        value = _lookup(block, key.removeprefix(block_name + "."))
        return f"the resolved `{key}`, which is: {_inline(value)}" if value not in (None, "", []) else \
            f"the resolved `{key}`, which is empty (nothing to do)"

    configs = ", ".join(f"`{c}`" for c in config_files) or "the module config"
    text = _IF_FAILS.sub("", text)
    text = _RESOLVE_CUSTOM.sub(custom, text)
    text = _RESOLVE_CONFIG.sub(f"the configuration resolved at import ({configs})", text)
    text = _ON_FAILURE.sub("", text)
    text = _BLOCK_REF.sub(lambda m: _placeholder(block, m) if m.group(1) == block_name else m.group(0), text)
    if "uv run" in text or "python3 " in text:
        text = SCRIPTS_NOTE + "\n\n" + text
    return text.rstrip() + "\n\n" + customization_section(block_name, block)


def customization_section(block_name: str, block: dict[str, Any]) -> str:
    lines = ["## Customization (resolved at import)", "",
             f"The `{block_name}` table of this skill's `customize.toml` with the team's overrides applied. Use these "
             f"values wherever the text says `{{{block_name}.<key>}}`. Entries prefixed `file:` are project files "
             "(globs allowed): read them with the file tools when they exist."]
    if not block:
        return "\n".join(lines + ["", "(no settings)"]) + "\n"
    dumped = yaml.safe_dump(block, sort_keys=False, allow_unicode=True, width=100).rstrip()
    return "\n".join(lines + ["", "```yaml", dumped, "```"]) + "\n"


def _lookup(block: dict[str, Any], dotted: str) -> Any:
    value: Any = block
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _placeholder(block: dict[str, Any], match: re.Match[str]) -> str:
    value = _lookup(block, match.group(2))
    if value is None:
        return match.group(0)
    if value in ("", [], {}):
        return f"{match.group(0)} (empty: nothing to do)"
    return value if isinstance(value, str) else _inline(value)


def _inline(value: Any) -> str:
    if isinstance(value, str):
        return value
    return "`" + yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000).strip() + "`"
