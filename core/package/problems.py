"""Problems found in a package, and the error that carries them to users.

A Problem is a value: validation collects them all in one pass. JSON Schema errors are turned into
problems here, with a JSON path, a plain message and a concrete fix.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

from jsonschema import ValidationError

from crewagent.core.base.errors import CrewError
from crewagent.core.schemas import validator

Level = Literal["error", "warning"]

CLASSIC_CODE = "NOT_SUPPORTED_CLASSIC_WORKFLOW"
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]*$")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a package; `file` is package-relative, never a server path."""

    file: str
    json_path: str
    message: str
    fix: str
    level: Level = "error"
    code: str = "PACKAGE_INVALID"

    def __str__(self) -> str:
        where = f"{self.file}: {self.json_path}" if self.json_path else self.file
        return f"{where}: {self.message} (fix: {self.fix})"

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


class PackageInvalid(CrewError):
    """A package that cannot be loaded; `.problems` lists every problem (errors and warnings)."""

    default_code = "PACKAGE_INVALID"

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = list(problems)
        errors = [p for p in self.problems if p.level == "error"] or self.problems
        first = str(errors[0]) if errors else "unknown problem"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(
            self.default_code,
            f"The package is invalid: {first}{more}",
            {"problems": [p.as_dict() for p in self.problems]},
        )

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.level == "error"]


class ClassicWorkflowNotSupported(PackageInvalid):
    """A classic BMAD workflow (workflow.yaml + instructions.xml): refused, never half-run."""

    default_code = CLASSIC_CODE


def json_path(parts: Any) -> str:
    out = "$"
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _PLAIN_KEY.match(str(part)):
            out += f".{part}"
        else:
            out += f"[{json.dumps(str(part))}]"
    return out


# --- JSON Schema errors, made readable --------------------------------------------------------

_PATTERN_FIXES = {
    r"^1\.1(\.\d+)?$": 'use "1.1"',
    r"^[A-Za-z0-9][A-Za-z0-9._:-]*$": "use letters, digits, '.', '_', ':' or '-', starting with a letter or digit",
    r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$": 'use a SemVer version such as "0.1.0"',
    r"^[a-fA-F0-9]{64}$": "use the 64-character hex SHA-256",
}
_JSON_TYPES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


def short_value(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _type_name(value: Any) -> str:
    return "null" if value is None else _JSON_TYPES.get(type(value), type(value).__name__)


def schema_problems(doc: Any, schema: str, file: str) -> list[Problem]:
    """Every violation of one of the package schemas, one Problem each, sorted by location."""
    errors = sorted(
        validator(schema).iter_errors(doc),
        key=lambda e: ([str(p) for p in e.absolute_path], str(e.validator)),
    )
    problems: list[Problem] = []
    for err in errors:
        problems += [Problem(file, path, msg, fix, code="SCHEMA_INVALID") for path, msg, fix in _explain(err)]
    return problems


def _explain(err: ValidationError) -> list[tuple[str, str, str]]:
    here = list(err.absolute_path)
    kind, expected, value = err.validator, err.validator_value, err.instance
    if kind == "required" and isinstance(value, dict):
        absent = [k for k in expected if k not in value]
        missing = [k for k in absent if err.message.startswith(repr(k))] or absent
        return [(json_path(here + [k]), f"required field '{k}' is missing", f"add '{k}'") for k in missing[:1]]
    if kind == "additionalProperties" and isinstance(value, dict):
        known = set(err.schema.get("properties", {}))
        allowed = ", ".join(sorted(known)) or "none"
        return [
            (json_path(here + [k]), f"unknown field '{k}'", f"remove it or correct its spelling (allowed: {allowed})")
            for k in value
            if k not in known
        ]
    path = json_path(here)
    if kind == "type":
        want = expected if isinstance(expected, str) else " or ".join(expected)
        return [(path, f"must be of type {want}, not {_type_name(value)}", f"use a {want} value")]
    if kind == "pattern":
        fix = _PATTERN_FIXES.get(expected, f"use a value matching {expected}")
        return [(path, f"{short_value(value)} has the wrong format", fix)]
    if kind == "format":
        fix = 'use an ISO 8601 date-time such as "2025-01-01T00:00:00Z"' if expected == "date-time" else f"use a valid {expected}"
        return [(path, f"{short_value(value)} is not a valid {expected}", fix)]
    if kind == "enum":
        return [(path, f"{short_value(value)} is not allowed", "use one of " + ", ".join(map(str, expected)))]
    if kind == "minLength":
        return [(path, "must not be empty", "fill in a value")]
    if kind == "minItems":
        return [(path, f"needs at least {expected} item(s)", f"add at least {expected} item(s)")]
    if kind == "minimum":
        return [(path, f"must be at least {expected}", f"use a number >= {expected}")]
    hint = err.schema.get("description") if isinstance(err.schema, dict) else None
    return [(path, err.message if len(err.message) <= 160 else err.message[:157] + "...",
             hint or "compare the value with the package format (core/schemas)")]
