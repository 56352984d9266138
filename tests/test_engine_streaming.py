"""Assistant text streams out of the engine as it is generated, to any surface (here: events, terminal)."""

from __future__ import annotations

from pathlib import Path

from cli.render import EventPrinter
from core.events import AssistantText, AssistantTextDelta, EngineEvent
from tests.scripts import STORY_KEY, drive, engine_harness, script_create_story


async def test_a_run_reports_each_reply_piece_by_piece_before_the_whole_text(project: Path) -> None:
    events: list[EngineEvent] = []

    async def keep(event: EngineEvent) -> None:
        events.append(event)

    async with engine_harness(project) as h:
        h.llm.piece_chars = 7
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        first, _ = await drive(h.engine, record, package, [STORY_KEY], on_event=keep)

    texts = [e for e in events if isinstance(e, AssistantText)]
    assert texts and first.assistant_text in [t.text for t in texts]
    for text in texts:
        at = events.index(text)
        pieces: list[AssistantTextDelta] = []
        for event in reversed(events[:at]):
            if not isinstance(event, AssistantTextDelta):
                break
            pieces.insert(0, event)
        assert "".join(p.text for p in pieces) == text.text  # every piece, in order, right before the whole
        assert len({p.turn for p in pieces}) == 1 and len(pieces) == -(-len(text.text) // 7)


def test_the_terminal_shows_pieces_as_they_come_and_does_not_repeat_the_reply() -> None:
    lines: list[str] = []
    pieces: list[str] = []
    printer = EventPrinter(None, lines.append, pieces=pieces.append)
    for piece in ("  Hello", " wor", "ld."):
        printer.show(AssistantTextDelta(run_id="r", text=piece, turn=1, agent_id="sm"))
    printer.show(AssistantText(run_id="r", text="Hello world.", agent_id="sm"))
    printer.show(AssistantText(run_id="r", text="Not streamed.", agent_id="sm"))
    assert "".join(pieces) == "\nsm:\nHello world.\n"
    assert lines == ["\nsm:\nNot streamed."]
