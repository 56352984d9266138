"""crewagent.yml's validation errors as the lines a person reads: `FILE: KEY: what is wrong`.

pydantic says "Extra inputs are not permitted" for a key the settings do not have; that is
usually a typo, so the line says the key is unknown and names the nearest one the file may use
there (`modle` → `model`), found with difflib among the keys of the settings at that place.
"""

from __future__ import annotations

import difflib
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError


def problem_lines(source: str, exc: ValidationError, root: type[BaseModel]) -> list[str]:
    problems = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        key = ".".join(str(p) for p in loc) or "(top level)"
        reason = unknown_key(loc, root) if err["type"] == "extra_forbidden" else err["msg"]
        problems.append(f"{source}: {key}: {reason}")
    return problems


def unknown_key(loc: tuple[Any, ...], root: type[BaseModel]) -> str:
    """`unknown key; did you mean `model`?` (or the keys allowed there, when none is near)."""
    allowed = keys_at(loc[:-1], root)
    near = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6) if loc else []
    if near:
        return f"unknown key; did you mean `{near[0]}`?"
    if allowed:
        return f"unknown key (the keys here: {', '.join(allowed)})"
    return "unknown key"


def keys_at(loc: tuple[Any, ...], root: type[BaseModel]) -> list[str]:
    """The keys the settings object at `loc` takes (dict keys and list indexes step into their values)."""
    current: Any = root
    for part in loc:
        model = _model_in(current)
        if model is not None and isinstance(part, str) and part in model.model_fields:
            current = model.model_fields[part].annotation
            continue
        values = [a for a in get_args(_without_none(current)) if a is not type(None)]
        if not values:
            return []
        current = values[-1]  # dict[str, X] → X, list[X] → X
    model = _model_in(current)
    return list(model.model_fields) if model is not None else []


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        kept = [a for a in get_args(annotation) if a is not type(None)]
        return kept[0] if len(kept) == 1 else annotation
    return annotation


def _model_in(annotation: Any) -> type[BaseModel] | None:
    annotation = _without_none(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
