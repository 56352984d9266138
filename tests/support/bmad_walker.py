"""A scripted model that walks any imported graph: it reads the NODE_BRIEF, takes an allowed move.

It completes the current node and moves along the default edge (or the edge `choose` picks), so
any workflow runs to completion without a script written for it. At a node with no outgoing
edges it sets `variables.workflowStatus` to "complete". A run it walks never stops for the user.

    async with engine_harness(project) as h:
        h.llm.responder = walker()
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from tests.support.fakes.llm_server import Reply
from tests.support.scripts import Body, calls, complete_node, current_node, is_post_completion, node_brief

_MOVE = re.compile(r"^  - (?P<to>\S+)(?: \[(?P<type>\w+)\])? \((?P<attrs>.*)\)$")


@dataclass(frozen=True)
class Move:
    to: str
    type: str  # "step" unless the brief says otherwise
    label: str
    default: bool


def allowed_moves(body: Body) -> list[Move] | None:
    """The brief's allowedNext entries; None when the brief says this is an end node."""
    brief = node_brief(body) or ""
    if "- allowedNext: none" in brief:
        return None
    moves = []
    for line in brief.splitlines():
        match = _MOVE.match(line)
        if match:
            attrs = match.group("attrs")
            label = re.search(r"label=([^,]*)", attrs)
            moves.append(Move(match.group("to"), match.group("type") or "step", label.group(1) if label else "",
                              "default=true" in attrs))
    return moves


Chooser = Callable[[str, list[Move]], Move | None]


def walker(choose: Chooser | None = None, visited: list[str] | None = None) -> Callable[[Body], Reply]:
    """`choose(node, moves)` may pick a move; otherwise the default edge is taken.

    `visited` (optional) collects every node the walker completed, in order.
    """

    def respond(body: Body) -> Reply:
        if is_post_completion(body):
            return Reply(content="Finished: every step of the imported workflow is done.")
        node = current_node(body)
        if node is None:
            return Reply(content="(walker: no NODE_BRIEF in this request)")
        moves = allowed_moves(body)
        if visited is not None:
            visited.append(node)
        if moves is None:
            return calls(complete_node(node, to=None, variables={"workflowStatus": "complete"}))
        picked = (choose(node, moves) if choose else None) or next((m for m in moves if m.default), None)
        if picked is None:
            return Reply(content=f"(walker: node {node} has no default move)")
        return calls(complete_node(node, to=picked.to))

    return respond
