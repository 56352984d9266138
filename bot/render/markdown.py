"""Assistant Markdown as Slack `markdown` blocks, which render the model's Markdown as written.

Slack caps the markdown blocks of one message at 12,000 characters together, so a longer reply
becomes several messages, cut at paragraph or line breaks (code fences closed and reopened).
Block types that take mrkdwn (sections, context, buttons) still go through bot.render.mrkdwn.
"""

from __future__ import annotations

from slack_sdk.models.blocks import MarkdownBlock

from .blocks import BlockJSON, SlackMessage, context, serialise
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
