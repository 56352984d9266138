"""The package-format JSON Schemas (Draft 2020-12), loaded once with format checking on."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from jsonschema import Draft202012Validator

_DIR = Path(__file__).parent
NAMES = ("bmad", "agents", "workflow-graph", "workflow-frontmatter", "step-frontmatter")


@cache
def validator(name: str) -> Draft202012Validator:
    """A cached validator for one of NAMES; `date-time` and friends are checked."""
    schema = json.loads((_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
