"""PromptComposer: the layered messages sent on every LLM call.

System layers (base rules, tool policy, mode banner, persona) and the run anchors (RUN_DIRECTIVE,
NODE_BRIEF with the step file inlined and a STATE_SUMMARY) are rebuilt from the current state on
every call and never persisted, so the model is re-anchored whenever the node or agent changes.
The Post-Completion profile drops every trace of an active step.

The order is chosen for prompt caching: providers reuse the longest byte-identical prefix of a
request, so what never changes in a run comes first (base rules, tool policy, mode; the tool specs
travel beside the messages), then the persona (changes only when another agent takes a node), then
the run directive whose per-node lines sit at its end, then the NODE_BRIEF.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from string import Template
from typing import Any, Literal

from ..package.models import Agent, Graph, Node, Package, Workflow
from ..tools.base import EffectivePolicy

TEMPLATES = Path(__file__).parent / "templates"
STEP_INLINE_MAX_BYTES = 16_384
SUMMARY_VALUE_MAX_CHARS = 300
DECISIONS_SHOWN = 20  # the latest decisions in the summary; the state document has them all

Mode = Literal["run", "agent", "chat", "script"]
Intent = Literal["start", "continue", "resume"]
Message = dict[str, Any]


@cache
def template(name: str) -> Template:
    return Template((TEMPLATES / f"{name}.md").read_text(encoding="utf-8"))


def render(template_name: str, /, **values: Any) -> str:
    return template(template_name).substitute(**values).strip()


def alias_for(path: str) -> str:
    """Project-relative paths in graphs and steps (`artifacts/x.md`) become `@project/artifacts/x.md`."""
    clean = path.strip()
    if clean.startswith("@"):
        return clean
    return "@project/" + clean.removeprefix("./").lstrip("/")


def _system(text: str) -> Message:
    return {"role": "system", "content": text}


def _user(text: str) -> Message:
    return {"role": "user", "content": text}


def render_tool_policy(policy: EffectivePolicy, tool_names: Sequence[str], mode: Mode) -> str:
    """The same effective policy that decides visibility and enforcement, in words."""
    if policy.fs_enabled:
        fs_line = f"enabled (maxReadBytes={policy.max_read_bytes}, maxWriteBytes={policy.max_write_bytes})"
        if mode != "run":
            fs_line += ", read-only in this mode"
    else:
        fs_line = "disabled (no file access for this agent)"
    if policy.mcp_servers:
        mcp_line = (
            f"servers {', '.join(policy.mcp_servers)} (tools named SERVER__TOOL; "
            + ("a tool that may change something waits for the run owner's approval)" if mode == "run"
               else "read-only tools only here)")
        )
    else:
        mcp_line = "no server for this agent" if policy.mcp_requested else "disabled"
    names = ", ".join(tool_names) if tool_names else "(none)"
    if mode == "run" and policy.fs_enabled:
        guidance = (
            "Prefer fs_apply_patch for state edits: @state/workflow.md with operation updateFrontmatter "
            "(append to stepsCompleted/artifacts/decisionLog, set variables/currentNodeId/updatedAt). "
            "fs_apply_patch with operation replace (oldText/newText) edits project text files; use fs_write "
            "to create files or replace them whole. All writes must be under @project or @state."
        )
    elif policy.fs_enabled:
        guidance = "Writes are not available here: read, list and search files, and ask the user with ui_ask_user."
    else:
        guidance = "You cannot read or write files; ask the user with ui_ask_user when you need input."
    if "shell_run" in tool_names:
        guidance += (
            " shell_run runs a command line in the project folder inside a sandbox (no network unless the "
            "operator allows it): read its exitCode, stdout and stderr; the operator's policy may forbid a "
            "command or make it wait for the run owner's approval."
        )
    return render("tool-policy", fs_line=fs_line, mcp_line=mcp_line, tool_names=names, guidance=guidance)


def render_persona(agent: Agent) -> str:
    """`systemPrompt` verbatim when the package compiled one, else the persona fields."""
    if agent.systemPrompt and agent.systemPrompt.strip():
        return agent.systemPrompt.strip()
    principles = "\n".join(f"- {line}" for line in agent.persona.principle_lines())
    actions = ""
    if agent.critical_actions:
        actions = "Critical actions:\n" + "\n".join(f"- {a}" for a in agent.critical_actions)
    return render(
        "persona",
        name=agent.metadata.name,
        title=agent.metadata.title,
        role=agent.persona.role,
        identity=agent.persona.identity,
        communication_style=agent.persona.communication_style,
        principles=principles,
        critical_actions=actions,
    ).replace("\n\n\n", "\n\n")


def effective_agent_id(graph: Graph, fm: dict[str, Any], active_agent_id: str) -> str:
    """node.agentId ?? activeAgentId; after completion the node is the end node the state stays on."""
    node = graph.node(graph.effective_node_id(fm.get("currentNodeId")))
    return (node.agentId if node and node.agentId else None) or active_agent_id


def _shorten(value: Any) -> Any:
    """Long strings are cut so the summary stays small and still valid JSON."""
    if isinstance(value, str) and len(value) > SUMMARY_VALUE_MAX_CHARS:
        return value[:SUMMARY_VALUE_MAX_CHARS] + "…"
    if isinstance(value, dict):
        return {k: _shorten(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v) for v in value[:50]]
    return value


def state_summary(fm: dict[str, Any], graph: Graph, answers: Sequence[dict[str, str]] = ()) -> str:
    """The compact memory of the run: earlier nodes' turns are not resent, so what they produced is here.

    The user's answers stay verbatim (with the node that asked); decisions, artifacts and
    variables come from the state document, which stays authoritative.
    """
    decisions = fm.get("decisionLog") or []
    summary = {
        "currentNodeId": graph.effective_node_id(fm.get("currentNodeId")),
        "stepsCompleted": list(fm.get("stepsCompleted") or []),
        "variables": _shorten(dict(fm.get("variables") or {})),
        "decisionLogCount": len(decisions),
        "decisions": _shorten(list(decisions)[-DECISIONS_SHOWN:]),
        "artifacts": list(fm.get("artifacts") or []),
        "userAnswers": list(answers),
    }
    return "STATE_SUMMARY\n" + json.dumps(summary, ensure_ascii=False, default=str)


class PromptComposer:
    """Builds messages for one package; caches what never changes (personas, node briefs)."""

    def __init__(
        self,
        package: Package,
        *,
        step_inline_max_bytes: int = STEP_INLINE_MAX_BYTES,
        redactions: Sequence[tuple[str, str]] = (),
    ) -> None:
        self.package = package
        self.step_inline_max_bytes = step_inline_max_bytes
        self.redactions = [(real, alias) for real, alias in redactions if real]
        self._personas: dict[str, str] = {}
        self._briefs: dict[tuple[str, str], str] = {}
        self._layers: dict[tuple[Any, ...], list[Message]] = {}

    # ---- shared layers ----------------------------------------------------

    def persona(self, agent: Agent) -> str:
        text = self._personas.get(agent.id)
        if text is None:
            text = self._personas[agent.id] = render_persona(agent)
        return text

    def system_layers(
        self, *, mode: Mode, agent: Agent | None, policy: EffectivePolicy, tool_names: Sequence[str]
    ) -> list[Message]:
        key = (mode, agent.id if agent is not None else None, policy, tuple(tool_names))
        cached = self._layers.get(key)
        if cached is not None:
            return list(cached)
        base = "base-rules-run" if mode == "run" else "base-rules-conversation"
        layers = [
            _system(render(base)),
            _system(render_tool_policy(policy, tool_names, mode)),
            _system(render("mode-banner", mode=mode)),
        ]
        if agent is not None and mode != "chat":
            layers.append(_system(self.persona(agent)))
        self._layers[key] = layers
        return list(layers)

    def redact(self, text: str) -> str:
        for real, alias in self.redactions:
            if real in text:
                text = text.replace(real, alias)
        return text

    # ---- run anchors ------------------------------------------------------

    def run_anchors(
        self,
        workflow: Workflow,
        fm: dict[str, Any],
        *,
        active_agent_id: str,
        intent: Intent,
        complete: bool,
        data_context: Sequence[str] = (),
        answers: Sequence[dict[str, str]] = (),
    ) -> list[Message]:
        """Any DataContext (fixed for the run), RUN_DIRECTIVE, and NODE_BRIEF unless complete."""
        graph = workflow.graph
        agent_id = effective_agent_id(graph, fm, active_agent_id)
        common = dict(workflow=workflow.id, graph=f"@pkg/{workflow.graph_path}", agent_id=agent_id)
        anchors = [_user(self.redact(text)) for text in data_context]
        if complete:
            anchors.append(_user(render("run-directive-post", **common)))
        else:
            node_id = graph.effective_node_id(fm.get("currentNodeId"))
            summary = self.redact(state_summary(fm, graph, answers))
            anchors += [
                _user(render("run-directive", intent=intent, current_node_id=node_id, **common)),
                _user(self.node_brief(workflow, node_id) + "\n\n" + summary),
            ]
        return anchors

    def node_brief(self, workflow: Workflow, node_id: str) -> str:
        key = (workflow.id, node_id)
        text = self._briefs.get(key)
        if text is None:
            text = self._briefs[key] = self._render_node_brief(workflow, node_id)
        return text

    def _render_node_brief(self, workflow: Workflow, node_id: str) -> str:
        graph = workflow.graph
        node = graph.node(node_id)
        if node is None:  # read_state already rejects unknown nodes; keep the brief honest anyway
            return f"NODE_BRIEF\n- currentNodeId: {node_id} (unknown node: ask the user how to continue)"
        step = workflow.step(node.id)
        front = step.frontmatter if step else {}
        lines = ["NODE_BRIEF", f"- currentNodeId: {node.id} (type={node.type})"]
        if node.title:
            lines.append(f"- title: {node.title}")
        if node.agentId:
            lines.append(f"- agentId: {node.agentId}")
        step_alias = f"@pkg/{node.file}"
        lines.append(f"- stepFile: {step_alias}")
        lines += _path_map("inputs", node.inputs or _strings(front.get("inputs")))
        lines += _path_map("outputsMap", node.outputs or _strings(front.get("outputs")))
        sets = _strings(front.get("setsVariables"))
        if sets:
            lines.append("- setsVariables: " + ", ".join(sets))
        lines += _allowed_next(graph, node)
        if step is None:
            lines.append(f"- stepContent: unavailable; fs_read {step_alias}")
            return "\n".join(lines)
        text = step.text.strip()  # the whole file, frontmatter too: the model need not read it again
        size = len(text.encode("utf-8"))
        if size > self.step_inline_max_bytes:
            lines.append(
                f"- stepContent: not inlined ({size // 1024} KB); fs_search then fs_read {step_alias} "
                "with startLine/endLine windows"
            )
            return "\n".join(lines)
        lines.append("- stepContent: below, the whole file with its frontmatter (no need to fs_read it)")
        return "\n".join(lines) + f"\n\nSTEP_FILE {step_alias}\n{text}"

    # ---- notes ------------------------------------------------------------

    @staticmethod
    def closing_note() -> Message:
        return _user(render("closing-note"))

    @staticmethod
    def loop_nudge(tool: str, count: int, code: str, message: str) -> str:
        return render("loop-nudge", tool=tool, count=count, code=code, message=message)


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def _path_map(label: str, paths: list[str]) -> list[str]:
    if not paths:
        return []
    return [f"- {label}:"] + [f"  - {p} -> {alias_for(p)}" for p in paths]


def _allowed_next(graph: Graph, node: Node) -> list[str]:
    edges = graph.outgoing(node.id)
    if not edges:
        return [
            "- allowedNext: none (end node). When its work is done, append it to stepsCompleted and set "
            'variables.workflowStatus to "complete"; keep currentNodeId unchanged.'
        ]
    lines = ["- allowedNext:"]
    for edge in edges:
        attrs = [f"label={edge.label}"]
        if edge.isDefault:
            attrs.append("default=true")
        if edge.conditionText:
            attrs.append(f'conditionText="{edge.conditionText}"')
        target = graph.node(edge.to)
        kind = f" [{target.type}]" if target is not None and target.type != "step" else ""
        lines.append(f"  - {edge.to}{kind} ({', '.join(attrs)})")
    if any((t := graph.node(e.to)) is not None and t.type == "subworkflow" for e in edges):
        lines.append("- subworkflow: after moving to a [subworkflow] node, end your turn; the runtime runs "
                     "that workflow and moves past the node")
    return lines
