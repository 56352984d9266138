"""What a person sees of a streamed reply in a thread of the fake Slack: the checks the kill -9 tests share."""

from __future__ import annotations

import json
from typing import Any

from tests.support.bot_harness import message_text
from tests.support.fakes import FakeSlack, ScriptedLLM


def replies_in(slack: FakeSlack, top: str, text: str) -> list[dict[str, Any]]:
    """The thread's messages that show any of `text` (its first words)."""
    return [m for m in slack.messages.values() if m.get("thread_ts") == top and text[:40] in message_text(m)]


def assert_shown_once(slack: FakeSlack, top: str, text: str) -> None:
    """`text` is in the thread whole, in one message, with no restart note, and no stream looks live."""
    shown = replies_in(slack, top, text)
    assert len(shown) == 1, [message_text(m) for m in shown]
    assert text in message_text(shown[0]), message_text(shown[0])  # the whole reply, not a fragment
    assert "interrupted by a restart" not in message_text(shown[0])
    live = [key for key, state in slack.streams.items() if state == "streaming"]
    assert not live, f"streams left open: {live}"


def asked(llm: ScriptedLLM, text: str) -> int:
    """How many model requests carried `text`."""
    return sum(text in json.dumps(body) for body in llm.requests)
