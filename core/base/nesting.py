"""How deep untrusted structured data (package JSON, YAML, the model's state values) may nest.

Real documents use a handful of levels; a hostile one nests thousands deep to exhaust the
stack of whatever walks it next (schema checks, copies, rendering). Checked without recursion.
"""

from __future__ import annotations

from typing import Any

MAX_DEPTH = 64


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """True when lists and dicts nest more than `limit` levels inside `value`."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False
