"""The session acts on the `*command` the surface parsed: typed text is parsed once, where it arrives."""

from __future__ import annotations

from pathlib import Path

from crewagent.core.api.sessions import TypedText
from tests.support.session_harness import kinds, session_harness


async def test_the_session_takes_the_command_the_surface_parsed(project: Path) -> None:
    async with session_harness(project, "create-story-micro") as s:
        await s.open("chat")

        out = await s.service.handle_text(s.session, TypedText.parse("*help"), s.emit)
        assert kinds(out) == ["notice"] and "Commands:" in out[0].text

        # The surface decided this text is not a command: the session does not parse it again.
        s.h.llm.add_reply("Plain answer.")
        out = await s.service.handle_text(s.session, TypedText("*help"), s.emit)
        assert kinds(out) == ["reply"] and out[0].text == "Plain answer."
        assert "*help" in str(s.requests[-1]["messages"][-1]["content"])


def test_typed_text_parses_a_command_once() -> None:
    assert TypedText.parse("  /PAUSE now") == TypedText("  /PAUSE now", "pause")
    assert TypedText.parse("*frobnicate").command is None
    assert TypedText.parse("hello").command is None
