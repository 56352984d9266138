"""MkDocs hook: the configuration reference is generated from crewagent.yml's JSON Schema at build time.

The schema comes from `crewagent config schema` (the settings models themselves), so the page cannot
drift from what the bot accepts: a new key appears with its type, default and docstring.
"""

from __future__ import annotations

import json
from typing import Any

from crewagent.cli.config_cmd import config_schema

PAGE = "configuration.md"
MARKER = "<!-- crewagent.yml reference: generated from the schema at build time -->"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} lost the line {MARKER!r} where the generated reference goes")
    return markdown.replace(MARKER, reference(config_schema()))


def reference(schema: dict[str, Any]) -> str:
    """Markdown tables: the top-level keys, then one section per nested settings object."""
    defs = schema.get("$defs", {})
    labels = _reachable(schema, defs)
    out = ["### Top-level keys", "", *_table(schema, labels), ""]
    for name, key in labels.items():
        model = defs[name]
        out += [f"### {key} {{#{_anchor(name)}}}", ""]
        if model.get("description"):
            out += [_one_paragraph(model["description"]), ""]
        out += [*_table(model, labels), ""]
    return "\n".join(out)


def _table(model: dict[str, Any], labels: dict[str, str]) -> list[str]:
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    required = set(model.get("required", ()))
    for key, field in model.get("properties", {}).items():
        default = "required" if key in required else _default(field)
        rows.append(f"| `{key}` | {_type(field, labels)} | {default} | {_cell(field.get('description', ''))} |")
    return rows


def _type(field: dict[str, Any], labels: dict[str, str]) -> str:
    """In words: `list of path`, `integer (≥ 1)`, a link to a nested object's section."""
    if "$ref" in field:
        name = field["$ref"].rsplit("/", 1)[-1]
        return f"[{labels.get(name, name)}](#{_anchor(name)})"
    if "anyOf" in field:
        kinds = [_type(option, labels) for option in field["anyOf"] if option.get("type") != "null"]
        return " or ".join(kinds) + (" or null" if len(kinds) < len(field["anyOf"]) else "")
    if "enum" in field:
        return " or ".join(f"`{json.dumps(v)}`" for v in field["enum"])
    if "const" in field:
        return f"`{json.dumps(field['const'])}`"
    kind = field.get("type", "any")
    if kind == "array":
        return f"list of {_type(field.get('items', {}), labels)}"
    if kind == "object" and isinstance(field.get("additionalProperties"), dict):
        return f"map of name to {_type(field['additionalProperties'], labels)}"
    if kind == "string" and field.get("format") == "path":
        kind = "path"
    limits = (("exclusiveMinimum", ">"), ("minimum", "≥"), ("maximum", "≤"), ("minLength", "length ≥"))
    bounds = [f"{sign} {field[word]}" for word, sign in limits if word in field]
    return kind + (f" ({', '.join(bounds)})" if bounds else "")


def _default(field: dict[str, Any]) -> str:
    if "default" not in field:
        return ""
    value = field["default"]
    if value is None:
        return "none"
    return f"`{json.dumps(value, ensure_ascii=False)}`"


def _reachable(schema: dict[str, Any], defs: dict[str, Any]) -> dict[str, str]:
    """Nested settings objects, in the order a reader meets them, with the key that holds each (`llm`)."""
    seen: dict[str, str] = {}

    def visit(node: Any, path: list[str]) -> None:
        if isinstance(node, list):
            for value in node:
                visit(value, path)
            return
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            if name not in seen and name in defs:
                seen[name] = ".".join(path)
                visit(defs[name], path)
        for key, value in node.get("properties", {}).items():
            visit(value, [*path, key])
        if isinstance(node.get("additionalProperties"), dict):
            visit(node["additionalProperties"], [*path, "NAME"])
        for word in ("items", "anyOf", "allOf", "oneOf"):
            if word in node:
                visit(node[word], path)

    visit(schema, [])
    return seen


def _anchor(name: str) -> str:
    return "config-" + name.lower()


def _one_paragraph(text: str) -> str:
    return " ".join(text.split())


def _cell(text: str) -> str:
    return _one_paragraph(text).replace("|", "\\|")
