"""Assistant text streams out of the engine as it is generated, to any surface (here: events, terminal)."""

from __future__ import annotations

from pathlib import Path

from crewagent.cli.chat_cmd import Screen
from crewagent.cli.render import EventPrinter
from crewagent.core.base.events import AssistantText, AssistantTextDelta, EngineEvent, LLMRetrying
from crewagent.core.session.outputs import Reply, ReplyDelta
from tests.support.scripts import STORY_KEY, drive, engine_harness, script_create_story


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


async def test_a_reply_cut_off_mid_stream_is_voided_and_streamed_again(project: Path) -> None:
    events: list[EngineEvent] = []

    async def keep(event: EngineEvent) -> None:
        events.append(event)

    async with engine_harness(project, max_retries=1) as h:
        h.llm.piece_chars = 5
        h.llm.add_reply("Half an answer that never ends", drop_after=3)
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        first, _ = await drive(h.engine, record, package, [STORY_KEY], on_event=keep)

    assert first.phase.value in ("waiting-user", "completed")
    restart = next(i for i, e in enumerate(events) if isinstance(e, AssistantTextDelta) and e.restart)
    cut = [e for e in events[:restart] if isinstance(e, AssistantTextDelta)]
    assert "".join(e.text for e in cut) == "Half an an" and events[restart].text == ""
    assert isinstance(events[restart + 1], LLMRetrying)  # the surfaces also hear that the call is made again
    whole = next(e for e in events[restart:] if isinstance(e, AssistantText))
    pieces = [e for e in events[restart + 1 : events.index(whole)] if isinstance(e, AssistantTextDelta)]
    assert "".join(p.text for p in pieces) == whole.text  # the new answer's pieces only, once
    assert not any("Half an" in e.text for e in events if isinstance(e, AssistantText))


def test_the_terminal_marks_a_cut_off_reply_and_shows_the_new_one_in_full() -> None:
    lines: list[str] = []
    pieces: list[str] = []
    printer = EventPrinter(None, lines.append, pieces=pieces.append)
    for piece in ("Half ", "an "):
        printer.show(AssistantTextDelta(run_id="r", text=piece, turn=1, agent_id="sm"))
    printer.show(AssistantTextDelta(run_id="r", text="", turn=1, agent_id="sm", restart=True))
    printer.show(AssistantTextDelta(run_id="r", text="", turn=1, agent_id="sm", restart=True))  # nothing shown: no mark
    for piece in ("Whole ", "answer."):
        printer.show(AssistantTextDelta(run_id="r", text=piece, turn=1, agent_id="sm"))
    printer.show(AssistantText(run_id="r", text="Whole answer.", agent_id="sm"))
    assert "".join(pieces) == "\nsm:\nHalf an \n(connection lost, retrying)\n\nsm:\nWhole answer.\n"
    assert lines == []


async def test_the_terminal_chat_marks_a_cut_off_conversation_reply_too(project: Path) -> None:
    lines: list[str] = []
    pieces: list[str] = []
    async with engine_harness(project) as h:
        screen = Screen(h.load("create-story-micro"), lines.append, pieces=pieces.append)
    await screen.show(ReplyDelta(text="Half", turn=1))
    await screen.show(ReplyDelta(text="", turn=1, restart=True))
    await screen.show(ReplyDelta(text="Whole.", turn=1))
    await screen.show(Reply(text="Whole."))
    assert "".join(pieces) == "\nassistant:\nHalf\n(connection lost, retrying)\n\nassistant:\nWhole.\n"
    assert lines == []
