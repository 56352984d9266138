"""Assistant Markdown as Slack `markdown` blocks, which render the model's Markdown as written.

Slack caps the markdown blocks of one message at 12,000 characters together, so a longer reply
becomes several messages, cut at paragraph or line breaks (code fences closed and reopened).
Block types that take mrkdwn (sections, context, buttons) still go through bot.render.mrkdwn.
"""

from __future__ import annotations

from collections.abc import Callable

from slack_sdk.models.blocks import MarkdownBlock

from .message import BlockJSON, SlackMessage, context, serialise
from .mrkdwn import split_text

MARKDOWN_LIMIT = 12_000


def markdown_block(text: str) -> BlockJSON:
    return serialise(MarkdownBlock(text=text))


def markdown_messages(text: str, *, header: str | None = None) -> list[SlackMessage]:
    """One message per 12,000 characters; `header` (mrkdwn) as a context line above the first."""
    pieces = split_text(text.strip(), MARKDOWN_LIMIT) or [" "]
    messages: list[SlackMessage] = []
    for index, piece in enumerate(pieces):
        blocks: list[BlockJSON] = []
        if header and index == 0:
            blocks.append(context(header))
        blocks.append(markdown_block(piece))
        messages.append(SlackMessage(text=piece, blocks=blocks))
    return messages


def clean_cut(text: str, start: int, room: int, measure: Callable[[str], int] = len) -> int:
    """Where a message that takes `text` from `start` on ends, so that what it takes measures at most
    `room`: the end of `text` when all of it fits, else just after the last paragraph break in what
    fits, else the last line break, else the last space, and mid-word only when what fits has none.
    A streamed reply cuts here when Slack's limit on one message would be passed, so words are never
    split across two messages. `measure` counts as Slack does (defused mentions grow the text)."""
    if room <= 0:
        return start
    if measure(text[start:]) <= room:
        return len(text)
    end = min(len(text), start + room)
    while end > start and (over := measure(text[start:end]) - room) > 0:
        end = max(start, end - over)  # defusing only lengthens text: take back what it added
    window = text[start:end]
    for mark in ("\n\n", "\n", " "):
        at = window.rfind(mark)
        if at > 0:
            return start + at + len(mark)
    return end
