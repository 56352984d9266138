"""What leaves a tool call: results capped for the model's context, and audit events without file contents."""

from __future__ import annotations

import hashlib
import json
from typing import Any

MAX_RESULT_CHARS = 50_000
AUDIT_OUTPUT_CHARS = 200
AUDIT_INPUT_CHARS = 500
_CONTENT_KEYS = frozenset({"content", "oldText", "newText"})
_LIST_KEYS = ("matches", "entries", "entriesPreview")


def capped_json(result: dict[str, Any], limit: int = MAX_RESULT_CHARS) -> tuple[dict[str, Any], str]:
    """cap_result, plus the JSON text of what it returns (so the result is serialised only once)."""
    text = json.dumps(result, ensure_ascii=False)
    if len(text) <= limit:
        return result, text
    capped = cap_result(result, limit)
    return capped, json.dumps(capped, ensure_ascii=False)


def cap_result(result: dict[str, Any], limit: int = MAX_RESULT_CHARS) -> dict[str, Any]:
    """Keep the result under `limit` JSON characters by shortening its bulk, never by cutting JSON."""
    size = _json_len(result)
    if size <= limit:
        return result
    for key in ("content", "contentPreview"):
        if isinstance(result.get(key), str):
            return _cap_text(result, key, limit)
    for key in _LIST_KEYS:
        if isinstance(result.get(key), list):
            capped = _cap_list(result, key, limit)
            if capped is not None:
                return capped
    text = json.dumps(result, ensure_ascii=False)
    return {
        "ok": bool(result.get("ok")),
        "truncated": True,
        "preview": text[: limit - 400],
        "hint": f"The result was {len(text)} characters; only the start is shown. Ask for less at a time.",
    }


def _cap_text(result: dict[str, Any], key: str, limit: int) -> dict[str, Any]:
    text: str = result[key]
    hint = (
        f"Only the first part of the text is shown (results are capped at {limit} characters). "
        "Use fs_search to find what you need, then fs_read with startLine/endLine for a small window."
    )
    base = {k: v for k, v in result.items() if k not in (key, "hint")}
    base.update(truncated=True, hint=hint)
    keep = len(text)
    while True:
        keep -= _json_len({**base, "contentPreview": text[:keep]}) - limit
        candidate = {**base, "contentPreview": text[: max(keep, 0)]}
        if _json_len(candidate) <= limit or keep <= 0:
            return candidate


def _cap_list(result: dict[str, Any], key: str, limit: int) -> dict[str, Any] | None:
    items: list[Any] = result[key]
    kept: list[Any] = []
    base = {k: v for k, v in result.items() if k != key}
    base.update(truncated=True, hint=f"Only {{n}} of {len(items)} items fit in one result. Narrow the request.")
    budget = limit - _json_len(base) - 50
    for item in items:
        budget -= _json_len(item) + 1
        if budget < 0:
            break
        kept.append(item)
    if not kept:
        return None
    base["hint"] = base["hint"].format(n=len(kept))
    return {**base, key: kept}


def sanitise_input(args: Any) -> Any:
    """Arguments as logged: file contents become {bytes, sha256}; long strings are shortened."""
    if isinstance(args, dict):
        out = {}
        for key, value in args.items():
            if key in _CONTENT_KEYS and isinstance(value, str):
                data = value.encode("utf-8")
                out[key] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            else:
                out[key] = sanitise_input(value)
        return out
    if isinstance(args, list):
        return [sanitise_input(v) for v in args]
    return _shorten(args, AUDIT_INPUT_CHARS)


def sanitise_output(result: Any) -> Any:
    """A result as logged: every string (contents, previews, widget blocks) cut to a short preview."""
    if isinstance(result, dict):
        return {k: sanitise_output(v) for k, v in result.items()}
    if isinstance(result, list):
        return [sanitise_output(v) for v in result]
    return _shorten(result, AUDIT_OUTPUT_CHARS)


def _shorten(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[: limit - 1] + "…"
    return value


def _json_len(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False))
