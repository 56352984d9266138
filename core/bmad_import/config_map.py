"""Module config keys (`{planning_artifacts}`, `{user_name}`, ...) mapped to mount paths or run values.

A key whose value lives under `{project-root}` becomes an `@project/...` path; any other key is a
plain value. Values come from the module config (`module.yaml` defaults in a source tree, the
resolved `config.yaml` of an installation) unless `--set key=value` overrides them.
"""

from __future__ import annotations

import re
import tomllib
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


@dataclass
class _Raw:
    module: str
    value: str  # the value a user would type (project-relative for path keys)
    result: str  # how the installer turns it into the final value, e.g. "{project-root}/{value}"
    origin: str


def build_config(source: BmadSource, overrides: dict[str, str]) -> ConfigMap:
    raw: dict[str, _Raw] = {}
    for module in sorted(source.modules, key=lambda m: (m != "core", m)):
        rel, data = source.module_config(module)
        for key, spec in data.items():
            if key in raw:
                continue
            if rel.endswith("config.yaml") and isinstance(spec, (str, int, float, bool)) and key not in ("code", "name"):
                value = str(spec)
                if value.startswith(_PROJECT_ROOT + "/"):
                    raw[key] = _Raw(module, value[len(_PROJECT_ROOT) + 1:], _PROJECT_ROOT + "/{value}", "config.yaml")
                else:
                    raw[key] = _Raw(module, value, "{value}", "config.yaml")
            elif rel.endswith("module.yaml") and isinstance(spec, dict) and "default" in spec:
                result = spec.get("result") if isinstance(spec.get("result"), str) else "{value}"
                raw[key] = _Raw(module, str(spec["default"]), result, "module default")
    for module, key, value in _central_config(source):
        if key not in raw:  # v6.6+ installations keep config in `_bmad/config.toml` (+ the team's custom/config.toml)
            result = _PROJECT_ROOT + "/{value}" if value.startswith(_PROJECT_ROOT + "/") else "{value}"
            plain = value[len(_PROJECT_ROOT) + 1:] if result != "{value}" else value
            raw[key] = _Raw(module, plain, result, "config.toml")
    unknown = [k for k in overrides if k not in raw]
    for key, value in overrides.items():
        known = raw.get(key, _Raw("core", "", "{value}", ""))
        if known.result.startswith(_PROJECT_ROOT):
            value = value.strip().removeprefix(_PROJECT_ROOT).strip("/")
        raw[key] = _Raw(known.module, value, known.result, "--set")
    plain = {k: r.value for k, r in raw.items()}
    keys = {
        key: _classify(key, r.module, _expand(r.result.replace("{value}", _expand(r.value, plain)), plain), r.origin)
        for key, r in raw.items()
    }
    return ConfigMap(keys, unknown)


def _central_config(source: BmadSource) -> list[tuple[str, str, str]]:
    """(module, key, value) from `config.toml` `[core]` / `[modules.<code>]`, team `custom/config.toml` over it."""
    merged: dict = {}
    for rel in ("config.toml", "custom/config.toml"):
        if rel in source.files:
            try:
                data = tomllib.loads(source.read(rel))
            except tomllib.TOMLDecodeError as exc:
                source.problems[rel] = f"not valid TOML ({exc}); its settings were not used: fix it and import again"
                continue
            for table, values in data.items():
                if isinstance(values, dict):
                    merged.setdefault(table, {})
                    for k, v in values.items():
                        merged[table][k] = {**merged[table].get(k, {}), **v} if isinstance(v, dict) else v
    out = [("core", k, str(v)) for k, v in merged.get("core", {}).items() if isinstance(v, (str, int, float, bool))]
    for module, values in (merged.get("modules") or {}).items():
        if isinstance(values, dict):
            out += [(module, k, str(v)) for k, v in values.items() if isinstance(v, (str, int, float, bool))]
    return out


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

