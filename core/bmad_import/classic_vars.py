"""`workflow.yaml` variables resolved the way BMAD's engine does (`core/tasks/workflow.xml`, step 1a).

`{config_source}:key` takes the module config's value (a mount path such as
`@project/_bmad-output/implementation-artifacts`, or a plain value), `{project-root}` is `@project`,
`{installed_path}` and every other `{project-root}/_bmad/...` file the package carries is
`@pkg/_bmad/...`, `date: system-generated` is the run's date, other `{var}`s expand from the file
itself. `{{var}}` placeholders are filled at run time and left as written.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from .config_map import ConfigMap
from .references import package_alias
from .source import BmadSource

_CONFIG_REF = re.compile(r"^\{config_source\}:([A-Za-z0-9_-]+)$")
_VAR = re.compile(r"(?<!\{)\{([A-Za-z0-9_-]+)\}(?!\})")
_BMAD = "{project-root}/_bmad/"
_CONVERTED = ("workflow.yaml", "workflow.yml", "workflow.md", "instructions.xml", "instructions.md")
DATE_TEXT = "today's date (system-generated: use the current date)"


@dataclass
class WorkflowVariables:
    display: dict[str, str]  # variable -> the value the model sees (@pkg/@project paths, values)
    for_resolver: dict[str, str]  # variable -> value in `{project-root}/_bmad/...` form (for file references)
    assets: set[str] = field(default_factory=set)  # `_bmad/`-relative files the variables name
    patterns: dict[str, dict[str, str]] = field(default_factory=dict)  # input_file_patterns, resolved

    folder: str = ""  # the workflow's folder, `_bmad/`-relative

    def file_rel(self, key: str) -> str | None:
        """The `_bmad/`-relative file a path variable names (`{installed_path}/x` or `x` beside the workflow)."""
        value = self.for_resolver.get(key, "")
        if value.startswith(_BMAD):
            value = value[len(_BMAD):]
        elif value and not value.startswith(("{", "/", "@", "\\")):
            value = posixpath.join(self.folder, value)
        else:
            return None
        rel = posixpath.normpath(value)
        return None if "{" in rel or rel.startswith("..") or rel.startswith("/") else rel

    @property
    def template(self) -> str | None:
        value = self.display.get("template", "")
        return value if value and value.lower() != "false" else None

    @property
    def validation(self) -> str | None:
        return self.display.get("validation") or None

    @property
    def output_file(self) -> str:
        return self.display.get("default_output_file") or "(the output document the step names)"


def resolve_variables(source: BmadSource, spec: dict[str, Any], folder: str, config: ConfigMap,
                      generated: set[str]) -> WorkflowVariables:
    cfg = config.substitutions()
    raw: dict[str, str] = {}
    for key, value in spec.items():
        if isinstance(value, bool):
            raw[str(key)] = "true" if value else "false"
        elif isinstance(value, (str, int, float)):
            raw[str(key)] = str(value).strip()
    raw.setdefault("installed_path", _BMAD + folder)
    raw.setdefault("config_source", f"{_BMAD}{folder.split('/', 1)[0]}/config.yaml")
    for key, value in list(raw.items()):
        match = _CONFIG_REF.match(value)
        if match:
            raw[key] = cfg.get(match.group(1), "{" + match.group(1) + "}")
        elif key == "date" and value == "system-generated":
            raw[key] = DATE_TEXT
    lookup = {**cfg, **raw}
    if raw.get("date") == DATE_TEXT:
        lookup["date"] = "{{date}}"  # inside a path (`proposal-{date}.md`) the run fills it in
    expanded = {key: _expand(value, lookup) for key, value in raw.items()}
    result = WorkflowVariables(display={}, for_resolver=expanded, folder=folder)
    for key, value in expanded.items():
        result.display[key] = _to_mounts(value, source, generated, result.assets)
    patterns = spec.get("input_file_patterns")
    if isinstance(patterns, dict):
        for name, entry in patterns.items():
            if isinstance(entry, dict):
                result.patterns[str(name)] = {
                    str(k): _to_mounts(_expand(str(v), lookup), source, generated, result.assets)
                    for k, v in entry.items() if isinstance(v, (str, int, float))
                }
    return result


def _expand(value: str, lookup: dict[str, str]) -> str:
    for _ in range(5):
        new = _VAR.sub(lambda m: lookup.get(m.group(1), m.group(0)) if m.group(1) != "project-root"
                       else m.group(0), value)
        if new == value:
            break
        value = new
    return value


def _to_mounts(value: str, source: BmadSource, generated: set[str], assets: set[str]) -> str:
    """`{project-root}/_bmad/<file the package carries>` -> `@pkg/_bmad/...`; `{project-root}` -> `@project`."""
    if value.startswith(_BMAD):
        rel = value[len(_BMAD):].rstrip("/")
        if source.exists(rel) or rel in generated:
            if source.exists(rel):
                assets.add(rel)
            return package_alias(rel)
        if any(f.startswith(rel + "/") and f.rsplit("/", 1)[-1] not in _CONVERTED for f in source.files):
            return package_alias(rel)  # a folder whose files are carried
    return value.replace("{project-root}", "@project")
