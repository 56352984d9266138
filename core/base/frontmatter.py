"""Markdown documents with a YAML frontmatter block: the format of state files and step files."""

from __future__ import annotations

from typing import Any

import yaml

from . import safe_yaml
from .errors import CrewError

_FENCE = "---"
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


class FrontmatterError(CrewError):
    def __init__(self, message: str) -> None:
        super().__init__("E_INVALID_FRONTMATTER", message)


def split(text: str) -> tuple[str | None, str]:
    """Return (yaml_text, body); yaml_text is None when the document has no frontmatter."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != _FENCE:
        return None, text
    for i in range(1, len(lines)):
        if lines[i].rstrip() in (_FENCE, "..."):
            return "\n".join(lines[1:i]), "\n".join(lines[i + 1 :])
    return None, text


def parse(text: str) -> tuple[dict[str, Any], str]:
    """Parse frontmatter into a mapping. Raises FrontmatterError with a readable reason."""
    raw, body = split(text)
    if raw is None:
        raise FrontmatterError("The document has no YAML frontmatter (a block between '---' lines at the top).")
    try:
        data = safe_yaml.load(raw)
    except safe_yaml.UnsafeYAML as exc:
        mark = exc.problem_mark
        where = f" at line {mark.line + 2}" if mark is not None else ""
        raise FrontmatterError(f"Frontmatter is refused{where}: {exc.problem}.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise FrontmatterError(f"Frontmatter is not valid YAML{where}: {problem}.") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise FrontmatterError("Frontmatter must be a YAML mapping (key: value lines).")
    return data, body


def render(data: dict[str, Any], body: str) -> str:
    """Serialise frontmatter + body; key order is kept so diffs stay readable."""
    dumped = yaml.dump(
        data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False
    )
    return f"{_FENCE}\n{dumped}{_FENCE}\n{body}"
