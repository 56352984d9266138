"""What a person sees of a streamed reply in a thread of the fake Slack: the checks the kill -9 tests share."""

from __future__ import annotations

import json
from typing import Any

from tests.support.bot_harness import message_text
from tests.support.fakes import FakeSlack, ScriptedLLM
from tests.support.fakes.llm_server import Reply, Responder
from tests.support.scripts import Body, hello_linear_responder, is_post_completion

# A question, a chat reply and a run's closing text long enough to be cut off mid-stream.
QUESTION = "How should we shape the weekly report?"
ANSWER = (
    "Keep the weekly report short and regular. Open with three lines on what was finished, then the plans for "
    "the next week, then the risks that could block them, each with a named owner. Close with one question for "
    "the team. Send it every Friday before noon so people read it before the weekend, and keep old reports in "
    "one folder for later."
)
CLOSING = (
    "The workflow is complete. Result: artifacts/hello-linear/result.md holds the team weekly-report template "
    "in bullet format, with sections for what was done, what comes next and the risks, and a short notes part "
    "at the end that assumes a weekly cadence. Tell me if you want changes to the sections, the order or the "
    "wording, and I will update the file in place."
)


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


def closing_responder(later: str | None = None) -> Responder:
    """hello-linear's script, whose run closes with CLOSING; with `later`, a chat message naming it after the
    run gets a short answer."""
    script = hello_linear_responder()

    def respond(body: Body) -> Reply:
        if later is not None and later in last_user_text(body):
            return Reply(content="Noted, nothing to add.")
        if is_post_completion(body):
            return Reply(content=CLOSING)
        return script(body)

    return respond


def last_user_text(body: Body) -> str:
    """The newest user message of a model request."""
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""
