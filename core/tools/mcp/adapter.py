"""An MCP server's tools as model tools: `SERVER__TOOL` names, checked schemas, results as text."""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any

from jsonschema import Draft202012Validator, SchemaError
from jsonschema.protocols import Validator
from mcp import types

from .server_config import McpServerConfig

SEPARATOR = "__"
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_DESCRIPTION = 1_024


@dataclass(frozen=True)
class McpTool:
    server: str
    name: str  # the server's own name for it
    wire: str  # what the model calls: SERVER__TOOL
    description: str
    schema: dict[str, Any]
    read_only: bool  # annotations.readOnlyHint is true
    auto_approved: bool  # listed in the server's auto_approve
    validator: Validator = field(compare=False, repr=False)

    @property
    def needs_approval(self) -> bool:
        return not (self.read_only or self.auto_approved)

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.wire, "description": self.description, "parameters": self.schema},
        }


def wire_name(server: str, tool: str) -> str:
    return f"{server}{SEPARATOR}{tool}"


def adapt(server: str, config: McpServerConfig, listed: list[types.Tool]) -> tuple[list[McpTool], list[str]]:
    """The tools to offer, and one problem per tool left out (for the log)."""
    tools: list[McpTool] = []
    problems: list[str] = []
    seen: dict[str, str] = {}
    allow = set(config.tools) if config.tools is not None else None
    for tool in listed:
        if allow is not None and tool.name not in allow:
            continue
        wire = wire_name(server, tool.name)
        if not FUNCTION_NAME.match(wire):
            problems.append(f"tool {tool.name!r}: {wire!r} is not a valid function name (letters, digits, _ and -, 64 at most)")
            continue
        if wire in seen:
            problems.append(f"tool {tool.name!r}: its name clashes with another tool of the server")
            tools = [t for t in tools if t.wire != wire]
            continue
        seen[wire] = tool.name
        schema, why = _checked_schema(tool.input_schema)
        if schema is None:
            problems.append(f"tool {tool.name!r}: its input schema is malformed ({why})")
            continue
        annotations = tool.annotations
        description = (tool.description or tool.title or tool.name).strip()[:MAX_DESCRIPTION]
        tools.append(
            McpTool(
                server=server,
                name=tool.name,
                wire=wire,
                description=description,
                schema=schema,
                read_only=bool(annotations and annotations.read_only_hint is True),
                auto_approved=tool.name in config.auto_approve,
                validator=Draft202012Validator(schema),
            )
        )
    if allow is not None:
        missing = sorted(allow - {t.name for t in listed})
        if missing:
            problems.append(f"tools: {', '.join(missing)} not offered by the server")
    return tools, problems


def _checked_schema(raw: Any) -> tuple[dict[str, Any] | None, str]:
    if not isinstance(raw, dict):
        return None, "not a JSON object"
    schema = dict(raw)
    schema.setdefault("type", "object")
    if schema.get("type") != "object":
        return None, "the arguments must be an object"
    schema.setdefault("properties", {})
    try:
        Draft202012Validator.check_schema(schema)
        json.dumps(schema)
    except SchemaError as exc:
        return None, exc.message[:200]
    except (TypeError, ValueError) as exc:
        return None, str(exc)[:200]
    return schema, ""


def argument_problems(tool: McpTool, arguments: dict[str, Any]) -> list[dict[str, str]]:
    """Where the arguments break the server's schema, as the model can read it ([] when valid)."""
    found = []
    for error in sorted(tool.validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))[:10]:
        path = "/".join(str(p) for p in error.absolute_path) or "(arguments)"
        found.append({"path": path, "message": error.message[:300]})
    return found


def result_text(result: types.CallToolResult, max_bytes: int) -> tuple[str, Any, bool]:
    """(text, structured content, truncated): text parts kept, images and resources summarised."""
    parts: list[str] = []
    for item in result.content:
        if isinstance(item, types.TextContent):
            parts.append(item.text)
        elif isinstance(item, (types.ImageContent, types.AudioContent)):
            kind = "image" if isinstance(item, types.ImageContent) else "audio"
            parts.append(f"[{kind}: {item.mime_type}, {_decoded_size(item.data)} bytes, not shown]")
        elif isinstance(item, types.ResourceLink):
            parts.append(f"[resource link: {item.name} {item.uri}]")
        elif isinstance(item, types.EmbeddedResource):
            resource = item.resource
            text = getattr(resource, "text", None)
            if isinstance(text, str):
                parts.append(f"[resource {resource.uri}]\n{text}")
            else:
                mime = getattr(resource, "mime_type", None) or "binary"
                parts.append(f"[resource {resource.uri}: {mime}, not shown]")
        else:
            parts.append(f"[{getattr(item, 'type', 'content')}: not shown]")
    text = "\n".join(parts)
    structured = result.structured_content
    if structured is not None and text and (structured == {"result": text} or _same_json(structured, text)):
        structured = None  # the text says the same (servers often send both)
    if structured is not None and len(json.dumps(structured, default=str)) > max_bytes:
        structured = None  # the text parts carry the same content, capped below
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, structured, False
    return raw[:max_bytes].decode("utf-8", errors="ignore"), structured, True


def _same_json(structured: Any, text: str) -> bool:
    try:
        return bool(json.loads(text) == structured)
    except ValueError:
        return False


def _decoded_size(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data)
