"""Reading the `<workflow>` XML of classic BMAD instructions safely, with errors a person can act on.

Classic instructions are plain XML (`instructions.xml`) or Markdown with a `<workflow>` block in it
(`instructions.md`, the v6.1+ `workflow.md`). They are parsed with the standard library's expat
parser, but a document type or entity declaration is refused before parsing (nothing is expanded),
and in Markdown a bare `&` or `<` that starts no tag is read as the text it is. A malformed file is
reported with its path, line and what to fix.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

_WORKFLOW_BLOCK = re.compile(r"<workflow(?:\s[^>]*)?(?:/>|>.*</workflow\s*>)", re.S)
_DECLARATION = re.compile(r"<!(?:DOCTYPE|ENTITY)", re.I)
_BARE_AMP = re.compile(r"&(?!(?:amp|lt|gt|quot|apos|#\d+|#x[0-9a-fA-F]+);)")
_BARE_LT = re.compile(r"<(?![A-Za-z_/!?])")


class ClassicXmlError(Exception):
    """A classic instructions file that cannot be read as XML; `str()` says where and what to fix."""

    def __init__(self, rel: str, line: int, problem: str, fix: str) -> None:
        self.rel, self.line, self.problem, self.fix = rel, line, problem, fix
        super().__init__(f"{rel}, line {line}: {problem}; {fix}")


@dataclass
class Instructions:
    """The parsed `<workflow>` element and the Markdown around it (kept as instructions too)."""

    root: ET.Element
    before: str  # text before `<workflow>` (a Markdown preamble), "" for pure XML
    after: str
    first_line: int  # line of `<workflow>` in the file


def has_workflow_block(text: str) -> bool:
    return _WORKFLOW_BLOCK.search(text) is not None


def parse_instructions(text: str, rel: str, *, markdown: bool) -> Instructions:
    """Parse the `<workflow>` block of `text` (a file at `rel`); raises ClassicXmlError."""
    declaration = _DECLARATION.search(text)
    if declaration:
        raise ClassicXmlError(rel, _line_at(text, declaration.start()), "a DOCTYPE or ENTITY declaration",
                              "remove it: classic instructions are plain XML and entities are not expanded")
    match = _WORKFLOW_BLOCK.search(text)
    if match is None:
        raise ClassicXmlError(rel, 1, "no <workflow>…</workflow> block",
                              "wrap the steps in <workflow> and </workflow>")
    block = match.group(0)
    if markdown:  # Markdown text inside the block: a lone `&` or `<` is prose, not markup
        block = _BARE_LT.sub("&lt;", _BARE_AMP.sub("&amp;", block))
    first_line = _line_at(text, match.start())
    try:
        root = ET.fromstring(block)
    except ET.ParseError as exc:
        line, column = exc.position
        raise ClassicXmlError(rel, first_line + line - 1, f"malformed XML at column {column + 1} ({_reason(exc)})",
                              _fix_for(exc)) from None
    return Instructions(root, text[: match.start()], text[match.end():], first_line)


def parse_fragment(text: str, rel: str) -> ET.Element:
    """A whole XML file (a task such as `core/tasks/workflow.xml`); raises ClassicXmlError."""
    declaration = _DECLARATION.search(text)
    if declaration:
        raise ClassicXmlError(rel, _line_at(text, declaration.start()), "a DOCTYPE or ENTITY declaration",
                              "remove it: entities are not expanded")
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        line, column = exc.position
        raise ClassicXmlError(rel, line, f"malformed XML at column {column + 1} ({_reason(exc)})",
                              _fix_for(exc)) from None


def _line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _reason(exc: ET.ParseError) -> str:
    return str(exc).split(":", 1)[0]


def _fix_for(exc: ET.ParseError) -> str:
    reason = _reason(exc)
    if "mismatched tag" in reason:
        return "a closing tag does not match the open element: close the element opened before it (e.g. </check>)"
    if "unclosed token" in reason or "no element found" in reason:
        return "an element is never closed: add its closing tag"
    if "undefined entity" in reason:
        return "write `&amp;` for a literal `&`"
    if "invalid token" in reason or "not well-formed" in reason:
        return "escape a literal `<` as `&lt;` and `&` as `&amp;`, and quote every attribute value"
    return "fix the XML so that every element is closed in order"
