"""Classic BMAD instruction XML rendered as Markdown a model follows inside one graph node.

Each tag of BMAD's workflow engine (`core/tasks/workflow.xml`) becomes an explicit instruction:
`<action>` a bullet, `<check if>` a conditional block, `<ask>` a question the model asks and then
waits for, `<goto>` a move to another node, `<template-output>` a save of the output document
followed by the continue/edit question, `<invoke-workflow>` a move to the sub-workflow node,
`<invoke-task>` / `<invoke-protocol>` the task's own text. Markdown between tags is kept as written.
"""

from __future__ import annotations

import re
import textwrap
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field

GOTO_TEXT = re.compile(r"\b(?:goto|go to|jump to|continue to|proceed to|return to|skip to|loop back to)\s+"
                       r"step\s+(\d+(?:\.\d+)?[a-z]?)", re.I)

ENGINE_RULES = """\
This workflow was a classic BMAD workflow run by BMAD's workflow engine; here every `<step>` is a
graph node. The engine's rules still hold:

- Execute every step completely, in order; never skip one. The graph's default move is the next
  step; a step that says "go to step N" moves to that step's node instead.
- Read complete files (no partial reads) when the instructions say to load a file.
- Replace `{{variables}}` with values you have found or were given; ask the user for one you
  cannot find.
- **Save after every template-output**: write the section to the output document (create it from
  the template the first time, edit it afterwards), show what you wrote and ask
  "[c] Continue, [e] Edit, [y] YOLO the rest", then wait for the answer.
- **Asking**: when a step says to ask, end your turn with the question and wait for the reply.
- **HALT** means stop and wait for the user; when the step says the workflow cannot go on, move
  to the `end` node and tell the user why.
- **YOLO mode**: if the user answers `y` or asks for #yolo, set `variables.yolo` to true; from then
  on skip confirmations and optional steps' questions and decide as an expert user would.
- Optional steps (marked optional): ask whether to include them, unless YOLO mode is on."""


MAX_DEPTH = 40


@dataclass
class RenderContext:
    """What the renderer needs from the graph: node ids for gotos and calls, inlined task texts."""

    goto: Callable[[str, str], str | None]  # ("step"|"anchor", value) -> node id
    call: Callable[[ET.Element], str | None]  # invoke-workflow element -> call node id
    task: Callable[[ET.Element], str]  # invoke-task element -> instructions to inline
    protocol: Callable[[str], str]  # protocol name -> instructions to inline
    output_file: str
    current: str = ""  # the node being rendered: a goto to it stays inside this step
    notes: list[str] = field(default_factory=list)


def clean(text: str | None) -> str:
    if not text or not text.strip():
        return ""
    lines = text.split("\n")
    first, rest = lines[0].strip(), textwrap.dedent("\n".join(lines[1:]))
    return "\n".join(x for x in (first, rest.strip("\n")) if x).strip()


def _indent(text: str, depth: int) -> list[str]:
    pad = "  " * depth
    return [pad + line if line else "" for line in text.split("\n")]


def _item(label: str, text: str, depth: int) -> list[str]:
    return _indent("- " + (label + text).replace("\n", "\n  "), depth)


def render_step(step: ET.Element, ctx: RenderContext) -> str:
    lines: list[str] = []
    head = clean(step.text)
    if head:
        lines += _indent(head, 0)
    for child in step:
        lines += render(child, 0, ctx)
        tail = clean(child.tail)
        if tail:
            lines += ["", *_indent(tail, 0), ""]
    return "\n".join(lines).strip("\n") + "\n"


def render(elem: ET.Element, depth: int, ctx: RenderContext) -> list[str]:
    if not isinstance(elem.tag, str):  # comments and processing instructions
        return []
    if depth >= MAX_DEPTH:  # absurdly deep nesting: the rest is plain text, not a recursion without end
        return _item("", " ".join(" ".join(elem.itertext()).split()), depth)
    tag, text = elem.tag, clean(elem.text)
    if tag in ("action", "output", "critical"):
        text = GOTO_TEXT.sub(lambda m: _goto_note(m, ctx), text)
    condition = elem.get("if")
    prefix = f"If {condition}: " if condition and tag != "check" else ""
    if tag == "action":
        return _item(prefix, text, depth) + _children(elem, depth + 1, ctx)
    if tag == "check":
        if condition:
            return _item("**If** ", f"{condition}:" + (f" {text}" if text else ""), depth) + _children(elem, depth + 1, ctx)
        return _item("Check: ", text, depth) + _children(elem, depth + 1, ctx)
    if tag == "ask":
        lines = _item(f"{prefix}**Ask the user** (end your turn with this question and wait for the reply; "
                      "in YOLO mode decide yourself): ", text, depth)
        return lines + _children(elem, depth + 1, ctx)
    if tag == "output":
        return _item(f"{prefix}Tell the user: ", text, depth) + _children(elem, depth + 1, ctx)
    if tag in ("critical", "mandate"):
        return _item("**CRITICAL:** ", text, depth) + _children(elem, depth + 1, ctx)
    if tag == "note":
        return _item("Note: ", text, depth) + _children(elem, depth + 1, ctx)
    if tag == "goto":
        return _goto(elem, depth, ctx, prefix)
    if tag == "anchor":
        return _item("", f"⚓ Anchor `{elem.get('id', '')}`: a \"go to anchor {elem.get('id', '')}\" "
                     "continues from here.", depth)
    if tag == "template-output":
        return _template_output(text, elem.get("file") or ctx.output_file, depth, prefix)
    if tag in ("invoke-workflow", "invoke-task", "invoke-protocol"):
        return _invoke(elem, text, depth, ctx, prefix)
    if tag == "example":
        return _indent("Example:\n\n```\n" + text + "\n```", depth)
    if tag in ("step", "substep"):
        label = f"Step {elem.get('n', '')}".strip() + (f" — {elem.get('goal') or elem.get('title')}"
                                                      if elem.get("goal") or elem.get("title") else "")
        return _item(f"**{label}**", "", depth) + _children(elem, depth + 1, ctx, head=text)
    attrs = " ".join(f'{k}="{v}"' for k, v in elem.attrib.items())
    return _item(f"`<{tag}{' ' + attrs if attrs else ''}>` ", text, depth) + _children(elem, depth + 1, ctx)


def _invoke(elem: ET.Element, text: str, depth: int, ctx: RenderContext, prefix: str) -> list[str]:
    """`<invoke-workflow>` as a move to its sub-workflow node, `<invoke-task>` and `<invoke-protocol>` inlined."""
    if elem.tag == "invoke-task":
        return _item(f"{prefix}**Run a task**: ", ctx.task(elem), depth)
    if elem.tag == "invoke-protocol":
        name = elem.get("name", text)
        return _item(f"{prefix}**Run the `{name}` protocol**:\n", ctx.protocol(name), depth)
    node = ctx.call(elem)
    what = text or elem.get("path", "") or elem.get("workflow", "")
    if node is None:
        return _item(f"{prefix}Run the workflow ", f"{what}: it is not available in this package; tell the "
                     "user and go on without it.", depth)
    return _item(f"{prefix}**Run a sub-workflow**: ", f"move to node `{node}` (set `currentNodeId`); it runs "
                 f"{what} and comes back here. Continue after this line when it is done.", depth)


def _children(elem: ET.Element, depth: int, ctx: RenderContext, head: str = "") -> list[str]:
    lines = _indent(head, depth) if head else []
    for child in elem:
        lines += render(child, depth, ctx)
        tail = clean(child.tail)
        if tail:
            lines += _indent(tail, depth)
    return lines


def _goto_note(match: re.Match[str], ctx: RenderContext) -> str:
    node = ctx.goto("step", match.group(1).rstrip("."))
    if node and node == ctx.current:
        return f"{match.group(0)} (repeat this step from its start, in this same node)"
    return f"{match.group(0)} (move to node `{node}`)" if node else match.group(0)


def _goto(elem: ET.Element, depth: int, ctx: RenderContext, prefix: str) -> list[str]:
    kind, value = ("anchor", elem.get("anchor", "")) if elem.get("anchor") else ("step", elem.get("step", ""))
    node = ctx.goto(kind, value)
    where = f"step {value}" if kind == "step" else f"anchor `{value}`"
    if node is None:
        ctx.notes.append(f"`goto {kind}=\"{value}\"` names no step of this workflow; left as text")
        return _item(prefix, f"Go to {where} (not found in this workflow).", depth)
    if node == ctx.current:
        return _item(f"{prefix}**Go to {where}** ", "in this same step (no move) and continue from there.", depth)
    more = " and continue from that anchor" if kind == "anchor" else ""
    return _item(f"{prefix}**Go to {where}**: ", f"move to node `{node}` (set `currentNodeId`){more}.", depth)


def _template_output(name: str, output_file: str, depth: int, prefix: str) -> list[str]:
    text = (f"write the content for `{name}` into the output document `{output_file}`, show the user what "
            "you wrote, ask \"[c] Continue, [e] Edit, [y] YOLO the rest\" and wait (see the engine rules).")
    return _item(f"{prefix}**Save section** (template-output): ", text, depth)
