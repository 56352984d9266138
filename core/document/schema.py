"""The run-state schema check, remembered per value so unchanged parts are not re-checked.

A state write usually changes a few keys (`currentNodeId`, `stepsCompleted`, `updatedAt`, one
more artifact); the rest — a growing `decisionLog`, `variables`, `artifacts` — are values that
passed a moment ago. The workflow-frontmatter schema is an object whose properties have
self-contained subschemas, so a document is valid exactly when it is an object, has the required
keys and every property value is valid against its subschema; and a plain array subschema
(`type: array` + `items`) holds exactly when the value is a list whose every item is valid. So
each distinct property value, and each distinct array item, is checked once. Any failure, and
any schema outside that shape, goes to the full validator, which also gives the messages.
"""

from __future__ import annotations

from typing import Any

from jsonschema import Draft202012Validator

_ANNOTATIONS = frozenset({"$schema", "$id", "$comment", "title", "description", "default", "examples"})
_ROOT_KEYWORDS = _ANNOTATIONS | {"type", "required", "properties", "additionalProperties"}
_ARRAY_KEYWORDS = _ANNOTATIONS | {"type", "items"}
_REFERENCES = ("$ref", "$dynamicRef", "$anchor", "$dynamicAnchor")
_REMEMBERED_MAX = 4096


class PartwiseCheck:
    def __init__(self, validator: Draft202012Validator) -> None:
        self.validator = validator
        schema = validator.schema
        self._required: tuple[str, ...] = ()
        self._parts: dict[str, Draft202012Validator] | None = None
        self._items: dict[str, Draft202012Validator] = {}  # properties that are plain arrays: their items
        if _decomposable(schema):
            self._required = tuple(schema.get("required", ()))
            properties: dict[str, Any] = schema.get("properties", {})
            self._parts = {key: validator.evolve(schema=sub) for key, sub in properties.items()}
            self._items = {
                key: validator.evolve(schema=sub["items"])
                for key, sub in properties.items()
                if sub.get("type") == "array" and isinstance(sub.get("items"), dict) and set(sub) <= _ARRAY_KEYWORDS
            }
        self._passed: dict[tuple[tuple[str, ...], str], None] = {}  # ((key,) or (key, "items"), repr) that passed

    def errors(self, document: Any) -> list[Any]:
        """The full validator's errors (path order); [] when valid, usually without running it."""
        if self._valid_by_parts(document):
            return []
        return sorted(self.validator.iter_errors(document), key=lambda e: [str(p) for p in e.absolute_path])

    def _valid_by_parts(self, document: Any) -> bool:
        if self._parts is None or not isinstance(document, dict):
            return False
        if any(key not in document for key in self._required):
            return False
        for key, value in document.items():
            part = self._parts.get(key)
            if part is None:
                continue  # additionalProperties: true
            items = self._items.get(key)
            if items is not None and isinstance(value, list):
                if not all(self._valid((key, "items"), item, items) for item in value):
                    return False
            elif not self._valid((key,), value, part):
                return False
        return True

    def _valid(self, where: tuple[str, ...], value: Any, validator: Draft202012Validator) -> bool:
        seen = (where, repr(value))  # built-in YAML/JSON values: equal repr means equal value
        if seen in self._passed:
            return True
        if not validator.is_valid(value):
            return False
        if len(self._passed) >= _REMEMBERED_MAX:
            del self._passed[next(iter(self._passed))]
        self._passed[seen] = None
        return True


def _decomposable(schema: Any) -> bool:
    """An object schema whose verdict is the conjunction of its properties' verdicts."""
    if not isinstance(schema, dict) or set(schema) - _ROOT_KEYWORDS or schema.get("type") != "object":
        return False
    if schema.get("additionalProperties", True) is not True:
        return False
    properties = schema.get("properties", {})
    return isinstance(properties, dict) and all(isinstance(s, dict) and not _refers(s) for s in properties.values())


def _refers(node: Any) -> bool:
    if isinstance(node, dict):
        return any(k in node for k in _REFERENCES) or any(_refers(v) for v in node.values())
    if isinstance(node, list):
        return any(_refers(v) for v in node)
    return False
