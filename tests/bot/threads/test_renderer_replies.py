"""How a thread's renderer ends a streamed reply, over the real SDK, an outbox on a file and the fake Slack:
the whole text that follows its stream's pieces ends that stream, also when it does not go on from the
streamed words, so the person reads exactly the whole text in one message and no stream stays live."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crewagent.bot.base.thread import ThreadRecord
from crewagent.bot.native.agent_session import AgentSessions
from crewagent.bot.native.fallbacks import Fallbacks
from crewagent.bot.native.status_line import StatusLines
from crewagent.bot.native.surface import AgentSurface
from crewagent.bot.status import StatusBoard
from crewagent.bot.threads.renderer import ThreadRenderer
from crewagent.core.api.sessions import outputs
from tests.support.fakes import FakeSlack
from tests.support.reply_streams import KEY, REWRITTEN, STREAMED, live_streams, replies, reply_port, shown

WAIT = 60.0


async def _no_snapshot(*_: Any) -> None:
    return None


async def test_a_reply_that_rewrites_its_streamed_words_replaces_them_in_the_one_message(tmp_path: Path) -> None:
    async with FakeSlack() as slack, reply_port(slack.api_url, tmp_path / "outbox.sqlite") as (port, courier):
        board = StatusBoard(port, interval=0.0, rate=0.0)
        fallbacks = Fallbacks()
        surface = AgentSurface(
            io=port, board=board, lines=StatusLines(port, fallbacks), sessions=AgentSessions(port, fallbacks),
            fallbacks=fallbacks, plan_source=lambda *_: None, stop_run=lambda _: None, stream_interval=0.0,
        )
        record = ThreadRecord.new(KEY, owner="U1", binding="default")
        renderer = ThreadRenderer(record, port, board, _no_snapshot, surface=surface, user="U1")
        for start in range(0, len(STREAMED), 20):
            await renderer.emit(outputs.ReplyDelta(text=STREAMED[start : start + 20], turn=1))
        assert shown(replies(slack)[0]) == STREAMED  # the words as the model wrote them, live
        await renderer.emit(outputs.Reply(text=REWRITTEN))
        assert await courier.idle(WAIT)
        assert await surface.idle(WAIT) and await board.idle(WAIT)
        assert [shown(m) for m in replies(slack)] == [REWRITTEN]
        assert not live_streams(slack)
        await surface.close()
        await board.close()
