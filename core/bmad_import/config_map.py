"""Module config keys (`{planning_artifacts}`, `{user_name}`, ...) mapped to mount paths or run values.

A key whose value lives under `{project-root}` becomes an `@project/...` path; any other key is a
plain value. Values come from the module config (`module.yaml` defaults in a source tree, the
resolved `config.yaml` of an installation) unless `--set key=value` overrides them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import yaml

from .source import BmadSource

Kind = Literal["path", "value", "unresolved"]
_PLACEHOLDER = re.compile(r"\{([A-Za-z0-9_-]+)\}")
_PROJECT_ROOT = "{project-root}"


@dataclass(frozen=True)
class ConfigKey:
    key: str
    module: str
    kind: Kind
    text: str  # what `{key}` becomes: an @project/ alias or the value ("" when unresolved)
    origin: str  # "module default", "config.yaml" or "--set"


@dataclass
class ConfigMap:
    keys: dict[str, ConfigKey]
    unknown_overrides: list[str]

    def substitutions(self) -> dict[str, str]:
        return {k: c.text for k, c in self.keys.items() if c.kind != "unresolved"}

    def config_yaml(self, module: str) -> str:
        """The `<module>/config.yaml` an installation would have, with the mapped values."""
        ordered = [c for c in self.keys.values() if c.module == "core"]
        ordered += [c for c in self.keys.values() if c.module == module and module != "core"]
        data = {c.key: c.text for c in ordered}
        header = "# Written by `crewagent import bmad`: paths are CrewAgent mount aliases (@project = the project checkout).\n"
        return header + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def build_config(source: BmadSource, overrides: dict[str, str]) -> ConfigMap:
    raw: dict[str, tuple[str, str, str | None, str]] = {}  # key -> (module, value, result template, origin)
    for module in sorted(source.modules, key=lambda m: (m != "core", m)):
        rel, data = source.module_config(module)
        installed = rel.endswith("config.yaml")
        for key, spec in data.items():
            if installed and isinstance(spec, (str, int, float, bool)) and key not in ("code", "name"):
                raw.setdefault(key, (module, str(spec), None, "config.yaml"))
            elif not installed and isinstance(spec, dict) and "default" in spec:
                result = spec.get("result") if isinstance(spec.get("result"), str) else "{value}"
                raw.setdefault(key, (module, str(spec["default"]), result, "module default"))
    unknown = [k for k in overrides if k not in raw]
    for key, value in overrides.items():
        module, _, result, _ = raw.get(key, ("core", "", "{value}", ""))
        if result is None and raw.get(key, ("", "", None, ""))[1].startswith(_PROJECT_ROOT):
            result = _PROJECT_ROOT + "/{value}"  # installed path key: the override is project-relative
        raw[key] = (module, value.strip().removeprefix(_PROJECT_ROOT).lstrip("/") if result and
                    result.startswith(_PROJECT_ROOT) else value, result or "{value}", "--set")
    plain = {k: v for k, (_, v, _, _) in raw.items()}
    keys: dict[str, ConfigKey] = {}
    for key, (module, value, result, origin) in raw.items():
        expanded = _expand(value, plain)
        final = (result or "{value}").replace("{value}", expanded)
        final = _expand(final, plain)
        keys[key] = _classify(key, module, final, origin)
    return ConfigMap(keys, unknown)


def _expand(text: str, values: dict[str, str], depth: int = 4) -> str:
    for _ in range(depth):
        new = _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)) if m.group(1) != "project-root"
                               else m.group(0), text)
        if new == text:
            break
        text = new
    return text


def _classify(key: str, module: str, value: str, origin: str) -> ConfigKey:
    if value.startswith(_PROJECT_ROOT):
        rel = value[len(_PROJECT_ROOT):].strip("/")
        rel = _expand(rel, {})
        if "{" not in rel:
            return ConfigKey(key, module, "path", f"@project/{rel}" if rel else "@project", origin)
    if "{" in value:
        return ConfigKey(key, module, "unresolved", "", origin)
    return ConfigKey(key, module, "value", value, origin)


def substitute(text: str, values: dict[str, str]) -> str:
    """Replace single-brace `{key}` placeholders; `{{key}}` run-time placeholders are left alone."""
    if not values:
        return text
    return re.sub(r"(?<!\{)\{([A-Za-z0-9_-]+)\}(?!\})", lambda m: values.get(m.group(1), m.group(0)), text)

