"""The status board's coalescing against the fake Slack Web API: progress is coalesced, phases are not."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from crewagent.bot.render.message import SlackMessage
from crewagent.bot.slack_port import SlackPort
from crewagent.bot.slack_send import Priority
from crewagent.bot.status import StatusBoard
from tests.support.fakes import FakeSlack

WAIT = 30.0


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


def state(text: str) -> SlackMessage:
    return SlackMessage(text=text)


def edits(slack: FakeSlack, ts: str) -> list[str]:
    return [str(p.get("text")) for p in slack.calls_to("chat.update") if p.get("ts") == ts]


async def test_a_phase_is_shown_even_when_the_run_moves_on_before_the_edit_is_sent(slack: FakeSlack) -> None:
    board = StatusBoard(SlackPort(slack.client()), interval=0.0, rate=0.0)
    ts = await board.post("C1", "1.0", state("Running"))
    assert ts is not None
    # Stopped, then at once resumed by a reply that waited for the stop: nothing runs in between.
    board.schedule("C1", ts, lambda: state("Paused"), priority=Priority.URGENT, milestone="paused")
    board.schedule("C1", ts, lambda: state("Running · step 2"), priority=Priority.LIVE)
    assert await board.idle(WAIT)
    assert edits(slack, ts) == ["Paused", "Running · step 2"]
    await board.close()


async def test_progress_between_phases_is_still_coalesced(slack: FakeSlack) -> None:
    board = StatusBoard(SlackPort(slack.client()), interval=0.0, rate=0.0)
    ts = await board.post("C1", "1.0", state("Running"))
    assert ts is not None
    for step in range(5):
        board.schedule("C1", ts, lambda step=step: state(f"Running · tool {step}"))
    board.schedule("C1", ts, lambda: state("Paused"), priority=Priority.URGENT, milestone="paused")
    assert await board.idle(WAIT)
    assert edits(slack, ts) == ["Paused"]
    await board.close()


async def test_close_sends_every_kept_phase(slack: FakeSlack) -> None:
    board = StatusBoard(SlackPort(slack.client()), interval=0.0, rate=0.0)
    ts = await board.post("C1", "1.0", state("Running"))
    assert ts is not None
    board.schedule("C1", ts, lambda: state("Paused"), priority=Priority.URGENT, milestone="paused")
    board.schedule("C1", ts, lambda: state("Completed"), priority=Priority.URGENT, milestone="completed")
    await board.close()  # before the sender had a turn
    assert edits(slack, ts) == ["Paused", "Completed"]
