"""Package check: sub-workflow calls name a workflow of the package, can continue after the call,
and never call their own caller (that run would never end)."""

from __future__ import annotations

from .docs import Inspector, WorkflowDocs


class SubworkflowChecks(Inspector):

    def check_subworkflows(self, workflows: list[WorkflowDocs], ids: set[str]) -> None:
        """Every subworkflow node names a workflow of this package, can continue after the call,
        and no workflow ends up calling itself (directly or through others): that run would never end."""
        calls: dict[str, list[tuple[str, str]]] = {}  # caller id -> [(callee id, step file)]
        known = ", ".join(sorted(ids)) or "none"
        for wf in workflows:
            nodes = wf.graph.get("nodes") if isinstance(wf.graph.get("nodes"), list) else []
            edges = wf.graph.get("edges") if isinstance(wf.graph.get("edges"), list) else []
            for i, node in enumerate(nodes):
                nid = node.get("id") if isinstance(node, dict) else None
                step = wf.steps.get(nid) if isinstance(nid, str) else None
                if step is None:
                    continue
                ref = step.frontmatter.get("subworkflowRef")
                if node.get("type") != "subworkflow":
                    if ref is not None:
                        self.warn(step.path, "$.subworkflowRef",
                                  f"subworkflowRef is ignored: graph node '{nid}' has type '{node.get('type')}'",
                                  f"set the type of node '{nid}' in {wf.graph_path} to subworkflow, or remove "
                                  "subworkflowRef")
                    continue
                callee = self._callee(step.path, nid, ref, ids, known)
                if callee is not None:
                    calls.setdefault(wf.id, []).append((callee, step.path))
                self._check_passing(step.path, step.frontmatter.get("passVariables"))
                if not any(isinstance(e, dict) and e.get("from") == nid for e in edges):
                    self.error(wf.graph_path, f"$.nodes[{i}]",
                               f"subworkflow node '{nid}' has no outgoing edge, so '{wf.id}' could not go on "
                               "after the call",
                               f"add an edge from '{nid}' to the node that follows the call",
                               "GRAPH_INTEGRITY_INVALID")
        for caller, targets in calls.items():
            for callee, step_path in targets:
                back = _call_path(calls, callee, caller)
                if back is not None:
                    chain = " → ".join([caller, *back])
                    self.error(step_path, "$.subworkflowRef",
                               f"workflow '{caller}' calls '{callee}', which leads back to '{caller}' ({chain}); "
                               "such a run would never end",
                               f"remove this call, or make sure '{callee}' never calls '{caller}' again",
                               "SUBWORKFLOW_CYCLE")

    def _callee(self, step_path: str, nid: str, ref: object, ids: set[str], known: str) -> str | None:
        """`ref` when it names a workflow of this package; otherwise None, and an error says what to write."""
        if not isinstance(ref, str) or not ref.strip():
            self.error(step_path, "$.subworkflowRef",
                       f"subworkflow node '{nid}' does not say which workflow it runs",
                       f"add 'subworkflowRef: <workflow id>' to the frontmatter (one of: {known})",
                       "SUBWORKFLOW_REF_INVALID")
            return None
        if ref not in ids:
            self.error(step_path, "$.subworkflowRef",
                       f"subworkflowRef '{ref}' is not a workflow of this package",
                       f"use the id of a workflow listed in bmad.json (one of: {known})",
                       "SUBWORKFLOW_REF_INVALID")
            return None
        return ref

    def _check_passing(self, step_path: str, passing: object) -> None:
        if passing is not None and not (isinstance(passing, list) and all(isinstance(v, str) for v in passing)):
            self.error(step_path, "$.passVariables", "passVariables must be a list of variable names",
                       "write it as a YAML list of names, e.g. passVariables: [featureName]",
                       "SUBWORKFLOW_REF_INVALID")


def _call_path(calls: dict[str, list[tuple[str, str]]], start: str, goal: str) -> list[str] | None:
    """The workflows from `start` to `goal` along sub-workflow calls (both included), or None."""
    paths: dict[str, list[str]] = {start: [start]}
    queue = [start]
    while queue:
        current = queue.pop(0)
        if current == goal:
            return paths[current]
        for callee, _ in calls.get(current, []):
            if callee not in paths:
                paths[callee] = [*paths[current], callee]
                queue.append(callee)
    return None
