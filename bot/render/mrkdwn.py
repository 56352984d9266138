"""Assistant Markdown → Slack mrkdwn, and splitting long text into Slack-sized pieces.

Models write CommonMark; Slack renders its own dialect (`*bold*`, `_italic_`, `<url|text>`,
no headings). Code blocks and inline code are kept verbatim apart from the escaping Slack
requires everywhere (`&`, `<`, `>`).
"""

from __future__ import annotations

import re

_FENCE = re.compile(r"^\s*```")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+")
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*\n]+?)(?<=\S)\*(?![\w*])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
_BOLD_MARK = "\x00B\x00"


def escape(text: str) -> str:
    """Escape the three characters Slack treats as control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


_SPECIAL = re.compile(r"<(?=!)")  # <!channel>, <!here>, <!everyone>, <!subteam^…>, <!date…>
_SPECIAL_OR_USER = re.compile(r"<(?=[!@])")  # the above, and <@U…> user mentions


def defuse_markdown_mentions(text: str) -> str:
    """The same for Markdown text (streamed replies): a zero-width space after the `<`, since
    Markdown shows `&lt;` as `<` again. The text looks unchanged and notifies no one."""
    return _SPECIAL_OR_USER.sub("<\u200b", text) if "<" in text else text


def defuse_mentions(text: str, *, users: bool = True) -> str:
    """Text whose mention markup Slack shows as written instead of notifying anyone.

    Only the `<` that opens a mention is escaped, so text that is already escaped (or holds
    links) is unchanged and this can run on anything about to be sent.
    """
    if "<" not in text:
        return text
    return (_SPECIAL_OR_USER if users else _SPECIAL).sub("&lt;", text)


def _inline(segment: str) -> str:
    """Convert emphasis and links in a stretch of text that holds no code."""
    segment = _LINK.sub(lambda m: f"<{m.group(2)}|{m.group(1)}>", segment)
    segment = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(2)}{_BOLD_MARK}", segment)
    segment = _ITALIC.sub(lambda m: f"_{m.group(1)}_", segment)
    segment = _STRIKE.sub(lambda m: f"~{m.group(1)}~", segment)
    return segment.replace(_BOLD_MARK, "*")


def _line(line: str) -> str:
    """Convert one non-code line; inline code spans are left untouched."""
    if _RULE.match(line):
        return "──────────"
    heading = _HEADING.match(line)
    if heading:
        title = heading.group(1).strip().strip("*_")
        return f"*{_inline(title)}*" if title else ""
    bullet = _BULLET.match(line)
    if bullet:
        line = f"{bullet.group(1)}• {line[bullet.end():]}"
    parts = line.split("`")
    if len(parts) % 2 == 0:  # an unmatched backtick: no inline code on this line
        return _inline(line)
    return "`".join(part if i % 2 else _inline(part) for i, part in enumerate(parts))


def to_mrkdwn(markdown: str) -> str:
    """Render assistant Markdown as Slack mrkdwn."""
    out: list[str] = []
    in_code = False
    for raw in escape(markdown.replace("\r\n", "\n")).split("\n"):
        if _FENCE.match(raw):
            # Slack shows a language tag after ``` literally, so drop it.
            out.append("```")
            in_code = not in_code
            continue
        out.append(raw if in_code else _line(raw))
    if in_code:
        out.append("```")
    return "\n".join(out).strip("\n")


def split_text(text: str, limit: int = 3000) -> list[str]:
    """Split mrkdwn into chunks of at most `limit` chars, preferring paragraph and line breaks.

    A code block cut in two is closed at the end of one chunk and reopened in the next,
    so each chunk renders on its own.
    """
    if len(text) <= limit:
        return [text] if text else []
    chunks: list[str] = []
    current = ""
    in_code = False
    for line in _lines_within(text, limit - 8):
        is_fence = line.strip().startswith("```")
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) + (4 if in_code else 0) > limit and current:
            chunks.append(current + ("\n```" if in_code else ""))
            if in_code and is_fence:  # the cut fell on the closing fence: already closed above
                current, in_code = "", False
                continue
            current = ("```\n" if in_code else "") + line
        else:
            current = candidate
        if is_fence:
            in_code = not in_code
    if current:
        chunks.append(current)
    return chunks


def _lines_within(text: str, width: int) -> list[str]:
    """Lines of `text`, with any single line longer than `width` hard-wrapped (at a space if possible)."""
    lines: list[str] = []
    for line in text.split("\n"):
        while len(line) > width:
            cut = line.rfind(" ", 0, width)
            cut = cut if cut > width // 2 else width
            lines.append(line[:cut])
            line = line[cut:].lstrip(" ")
        lines.append(line)
    return lines


def truncate(text: str, limit: int) -> str:
    """Shorten to `limit` characters with an ellipsis."""
    return text if len(text) <= limit else text[: max(0, limit - 1)].rstrip() + "…"
