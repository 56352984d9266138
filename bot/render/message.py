"""One Slack message body and the smallest block builders everything else in render/ composes.

Kept apart from bot.render.blocks so the Markdown renderer and the Block Kit builders share them
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeAlias

from slack_sdk.models.blocks import Block, ContextBlock, MarkdownTextObject, SectionBlock

from .mrkdwn import defuse_mentions, truncate

MAX_BLOCKS = 50
SECTION_LIMIT = 3000
FALLBACK_LIMIT = 300
KEPT_BLOCKS = 256  # recent inputs whose block JSON each caching builder keeps


BlockJSON: TypeAlias = dict[str, Any]
"""A block as slack_sdk serialised it; shared between messages, so never modified."""


@dataclass
class SlackMessage:
    """One chat.postMessage / chat.update body."""

    text: str  # notification / accessibility fallback
    blocks: list[BlockJSON] = field(default_factory=list)

    def payload(self) -> dict[str, Any]:
        """The API arguments. No text in it may notify anyone: model, user and package text reach
        the fallback `text` (the one notifications show) and the blocks' mrkdwn."""
        assert len(self.blocks) <= MAX_BLOCKS
        text = defuse_mentions(truncate(self.text, FALLBACK_LIMIT)) or " "
        return {"text": text, "blocks": [defused(block) for block in self.blocks]}


def defused(value: Any) -> Any:
    """A block with every mrkdwn text defused; unchanged parts are shared, not copied (blocks are cached)."""
    if isinstance(value, dict):
        if value.get("type") == "mrkdwn" and isinstance(value.get("text"), str):
            text = defuse_mentions(value["text"])
            return value if text is value["text"] else {**value, "text": text}
        changed = {k: v2 for k, v in value.items() if (v2 := defused(v)) is not v}
        return {**value, **changed} if changed else value
    if isinstance(value, list):
        items = [defused(v) for v in value]
        return value if all(a is b for a, b in zip(items, value)) else items
    return value


def serialise(block: Block) -> BlockJSON:
    """The block's JSON; slack_sdk checks Slack's limits here and raises if one is broken."""
    return block.to_dict()


@lru_cache(maxsize=KEPT_BLOCKS)
def section(mrkdwn_text: str) -> BlockJSON:
    return serialise(SectionBlock(text=MarkdownTextObject(text=truncate(mrkdwn_text, SECTION_LIMIT))))


@lru_cache(maxsize=KEPT_BLOCKS)
def context(mrkdwn_text: str) -> BlockJSON:
    return serialise(ContextBlock(elements=[MarkdownTextObject(text=truncate(mrkdwn_text, SECTION_LIMIT))]))
