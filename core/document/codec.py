"""The text form of the run state: YAML frontmatter + Markdown body, parsed and rendered fast.

Both directions are on the hot path (every state write renders, every read parses), so this uses
libyaml's C loader and dumper, remembers the latest document of each state file with its parse
and sha256 (used only while the file holds exactly those bytes, so never stale), and renders a
document as one cached fragment per top-level key: the entries of a block mapping render
independently, so a write re-renders only the keys whose values changed.
"""

from __future__ import annotations

import threading
from datetime import date, datetime, timezone
from typing import Any, NamedTuple

import yaml

from ..base.frontmatter import parse

_LIST_FIELDS = ("stepsCompleted", "artifacts", "decisionLog")
_SCALARS = frozenset({str, int, float, bool, type(None)})
_KNOWN: dict[str, Known] = {}  # state file path -> its latest document, least recently used first
_KNOWN_MAX = 1024  # state files (runs); about 10 KB each
_KNOWN_LOCK = threading.Lock()  # a new run's first state is remembered on the thread that creates the run
_FRAGMENTS: dict[str, str] = {}  # repr((key, value)) -> that entry's YAML lines
_FRAGMENTS_MAX = 1024


class _Dumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """No anchors/aliases: each top-level value is rendered on its own, so shared objects are spelled out."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


class Known(NamedTuple):
    """A state document with its sha256 and parse; the frontmatter is shared, so never mutate it."""

    data: bytes
    sha256: str
    frontmatter: dict[str, Any]
    body: str


class Draft(NamedTuple):
    """A document the runtime rendered, with the frontmatter it was rendered from (no parse needed)."""

    text: str
    frontmatter: dict[str, Any]
    body: str


def parse_text(text: str) -> tuple[dict[str, Any], str]:
    """Frontmatter + body (libyaml's loader, the same messages as every other document)."""
    return parse(text)


def render_text(data: dict[str, Any], body: str) -> str:
    """Block-style YAML in key order, then the body."""
    dumped = "".join(_fragment(key, value) for key, value in data.items()) if data else _dump(data)
    return f"---\n{dumped}---\n{body}"


def render_draft(data: dict[str, Any], body: str) -> Draft:
    return Draft(render_text(data, body), data, body)


def _fragment(key: Any, value: Any) -> str:
    seen = repr((key, value))  # built-in YAML values: equal repr means equal value
    text = _FRAGMENTS.get(seen)
    if text is None:
        text = _dump({key: value})
        if len(_FRAGMENTS) >= _FRAGMENTS_MAX:
            del _FRAGMENTS[next(iter(_FRAGMENTS))]
        _FRAGMENTS[seen] = text
    return text


def _dump(data: Any) -> str:
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False)


def known(path: str, data: bytes) -> Known | None:
    """What was remembered for `path`, if the file holds exactly `data` (read just now)."""
    with _KNOWN_LOCK:
        found = _KNOWN.pop(path, None)
        if found is None or found.data != data:
            return None
        _KNOWN[path] = found  # now the most recently used
        return found


def remember(path: str, doc: Known) -> None:
    with _KNOWN_LOCK:
        _KNOWN.pop(path, None)
        if len(_KNOWN) >= _KNOWN_MAX:
            del _KNOWN[next(iter(_KNOWN))]
        _KNOWN[path] = doc


def normalise(fm: dict[str, Any]) -> dict[str, Any]:
    """A copy with defaults filled, YAML dates as ISO strings and empty timestamps dropped: an empty `updatedAt`/`decidedAt` reads as absent."""
    out = {k: plain(v) for k, v in fm.items()}
    for key in _LIST_FIELDS:
        if out.get(key) is None:
            out[key] = []
    if out.get("variables") is None:
        out["variables"] = {}
    if out.get("currentNodeId") is None:
        out["currentNodeId"] = ""
    if isinstance(out.get("schemaVersion"), (int, float)):
        out["schemaVersion"] = str(out["schemaVersion"])
    if out.get("updatedAt") == "":
        del out["updatedAt"]
    if isinstance(out["decisionLog"], list):
        for item in out["decisionLog"]:
            if isinstance(item, dict) and item.get("decidedAt") == "":
                del item["decidedAt"]
    return out


def plain(value: Any) -> Any:
    """YAML timestamps become ISO strings (naive times are taken as UTC), recursively; a copy."""
    if type(value) in _SCALARS:
        return value
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
