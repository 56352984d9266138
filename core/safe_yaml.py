"""YAML from packages and from the model, loaded without aliases and with bounded nesting.

An alias (`*a`) reuses an anchored node, so a few lines of `&a [*a, *a, ...]` describe a value
with billions of elements: the loader builds it cheaply (shared objects), and the first thing
that walks it (rendering, JSON, a copy) exhausts memory. Nothing we read needs aliases, so a
document that uses one is refused, as is one nested deeper than MAX_DEPTH. The check runs on
libyaml's composed node graph, before any Python value exists, and costs one pass over the
nodes; documents without a `*` cannot hold an alias and skip it.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from .nesting import MAX_DEPTH

# libyaml when available: state files are parsed on every write, so this is on the hot path.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UnsafeYAML(yaml.YAMLError):
    """A well-formed document this service refuses to load; `problem` says why, `problem_mark` where."""

    def __init__(self, problem: str, mark: Any = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


def load(text: str) -> Any:
    """Like yaml.safe_load, but raises UnsafeYAML for aliases and for nesting deeper than MAX_DEPTH."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check(node, may_alias="*" in text)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check(root: Node, *, may_alias: bool) -> None:
    """One iterative pass: a node reached twice is an alias; depth is counted per path."""
    seen: set[int] = set()
    stack: list[tuple[Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if may_alias:
            if id(node) in seen:
                why = "anchors and aliases (&name, *name) are not allowed; write each value out in full"
                raise UnsafeYAML(why, node.start_mark)
            seen.add(id(node))
        if isinstance(node, SequenceNode):
            children = node.value
        elif isinstance(node, MappingNode):
            children = [part for pair in node.value for part in pair]
        else:
            continue
        if depth > MAX_DEPTH:  # containers inside containers, as nesting.too_deep counts them
            raise UnsafeYAML(f"values are nested more than {MAX_DEPTH} levels deep", node.start_mark)
        stack.extend((child, depth + 1) for child in children)
