"""YAML from packages and from the model, loaded without aliases and with bounded nesting.

An alias (`*a`) reuses an anchored node, so a few lines of `&a [*a, *a, ...]` describe a value
with billions of elements: the loader builds it cheaply (shared objects), and the first thing
that walks it (rendering, JSON, a copy) exhausts memory. Nothing we read needs aliases, so a
document that aliases a list or mapping is refused, as is one nested deeper than MAX_DEPTH. The
check runs on libyaml's composed node graph, before any Python value exists, and costs one pass
over its lists and mappings; documents without both `&` and `*` cannot hold an alias.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, SequenceNode

from .nesting import MAX_DEPTH

_COLLECTIONS = (SequenceNode, MappingNode)
# libyaml when available: state files are parsed on every write, so this is on the hot path.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class UnsafeYAML(yaml.YAMLError):
    """A well-formed document this service refuses to load; `problem` says why, `problem_mark` where."""

    def __init__(self, problem: str, mark: Any = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.problem_mark = mark


def load(text: str) -> Any:
    """Like yaml.safe_load, but raises UnsafeYAML for aliases of collections and for nesting deeper than MAX_DEPTH."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check(node, may_alias="*" in text and "&" in text)  # an alias needs an anchor
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _check(root: Node, *, may_alias: bool) -> None:
    """One iterative pass over the collections: one reached twice is an alias; depth is counted per path.

    An aliased scalar is left alone: it repeats one value and cannot grow past the text's size.
    """
    seen: set[int] = set()
    stack: list[tuple[Node, int]] = [(root, 1)] if isinstance(root, _COLLECTIONS) else []
    while stack:
        node, depth = stack.pop()
        if may_alias:
            if id(node) in seen:
                why = "anchors and aliases (&name, *name) are not allowed; write each value out in full"
                raise UnsafeYAML(why, node.start_mark)
            seen.add(id(node))
        if depth > MAX_DEPTH:  # containers inside containers, as nesting.too_deep counts them
            raise UnsafeYAML(f"values are nested more than {MAX_DEPTH} levels deep", node.start_mark)
        if isinstance(node, SequenceNode):
            stack.extend((child, depth + 1) for child in node.value if isinstance(child, _COLLECTIONS))
        else:
            for key, value in node.value:
                if isinstance(key, _COLLECTIONS):
                    stack.append((key, depth + 1))
                if isinstance(value, _COLLECTIONS):
                    stack.append((value, depth + 1))
