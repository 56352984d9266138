"""BMAD v6.6+ `customize.toml` blocks, with team overrides merged the way BMAD's resolver merges them.

A skill's `customize.toml` holds its defaults (`[agent]` or `[workflow]`); a team puts overrides in
`_bmad/custom/<skill-name>.toml` (or a folder given with `--custom`). BMAD's structural rules:
scalars override, tables deep-merge, arrays of tables keyed by `code` or `id` replace the matching
entry and append new ones, other arrays append. Personal `<skill-name>.user.toml` files belong to
one person; a bot serves a team, so they are reported and not applied.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..report import ImportReport
from ..source import BmadSource

_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")


def merge(base: Any, override: Any) -> Any:
    """`override` laid over `base` by BMAD's rules; neither argument is changed."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            out[key] = merge(base[key], value) if key in base else value
        return out
    if isinstance(base, list) and isinstance(override, list):
        key = _item_key(base + override)
        if key is None:
            return base + override
        out = list(base)
        for item in override:
            at = next((i for i, old in enumerate(out) if old.get(key) == item.get(key)), None)
            if at is None:
                out.append(item)
            else:
                out[at] = item
        return out
    return override


def _item_key(items: list[Any]) -> str | None:
    """`code` or `id` when every entry is a table carrying it (an array of tables keyed by it)."""
    if not items or not all(isinstance(i, dict) for i in items):
        return None
    return next((k for k in ("code", "id") if all(k in i for i in items)), None)


def parse_toml(text: str, label: str, report: ImportReport) -> dict[str, Any] | None:
    """The parsed file, or None after reporting the file, the line and what to fix."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        where = _LINE.search(str(exc))
        line = f" line {where.group(1)}" if where else ""
        problem = _LINE.sub("", str(exc)).strip()
        report.leave_out(label, f"not valid TOML:{line} {problem}; fix that line (quote strings, close brackets, "
                                "one `key = value` per line) and import again")
        return None


@dataclass
class Customizations:
    """Team override files by skill name, from `_bmad/custom/` of an installation and/or `--custom`."""

    team: dict[str, list[tuple[str, dict[str, Any]]]] = field(default_factory=dict)  # name -> [(label, data)]
    used: set[str] = field(default_factory=set)

    def block(self, source: BmadSource, skill_dir: str, skill: str, key: str,
              report: ImportReport) -> dict[str, Any] | None:
        """The merged `[key]` table of one skill: its defaults, then every team override in order.
        None when the skill's own `customize.toml` is not valid TOML (reported)."""
        rel = f"{skill_dir}/customize.toml"
        base: dict[str, Any] = {}
        if source.exists(rel):
            data = parse_toml(source.read(rel), rel, report)
            if data is None:
                return None
            base = data.get(key, {}) if isinstance(data.get(key), dict) else {}
        for label, data in self.team.get(skill, []):
            override = data.get(key)
            if isinstance(override, dict):
                base = merge(base, override)
                self.used.add(label)
        return base


def load_customizations(source: BmadSource, custom_dir: Path | None, report: ImportReport) -> Customizations:
    found = Customizations()
    folders: list[tuple[str, Path]] = []
    if (source.root / "custom").is_dir():
        folders.append(("_bmad/custom", source.root / "custom"))
    if custom_dir is not None:
        if not custom_dir.is_dir():
            report.warnings.append(f"--custom {custom_dir.name}: no such folder; no team customizations applied")
        else:
            folders.append((custom_dir.name, custom_dir))
    for name, folder in folders:
        for path in sorted(folder.glob("*.toml")):
            label = f"{name}/{path.name}"
            if path.name == "config.toml":
                report.customizations.append(f"`{label}` applied to the module configuration")
                continue
            if path.name.endswith(".user.toml"):
                report.leave_out(label, "a personal override (`*.user.toml`); a bot serves a whole team, so only "
                                        "team files (`<skill-name>.toml`) are applied")
                continue
            try:
                text = path.read_text(encoding="utf-8-sig")
            except (OSError, UnicodeDecodeError):
                report.leave_out(label, "cannot be read as UTF-8 text; save it as UTF-8 and import again")
                continue
            data = parse_toml(text, label, report)
            if data is not None:
                found.team.setdefault(path.name.removesuffix(".toml"), []).append((label, data))
    return found


def report_unused(custom: Customizations, skills: set[str], report: ImportReport) -> None:
    for skill, entries in sorted(custom.team.items()):
        for label, _ in entries:
            if label in custom.used:
                report.customizations.append(f"`{label}` applied to `{skill}`")
            elif skill not in skills:
                report.leave_out(label, f"no imported skill is named `{skill}`; check the file name")
            else:
                report.leave_out(label, "it has no `[agent]` or `[workflow]` table for that skill")
