"""A streamed reply on its own, over the real SDK, a SlackPort with its outbox on a file and the fake Slack.

Tests use it in process; the kill -9 tests run it as a process (`python -m tests.support.reply_streams`)
that streams a reply, finishes it with a text that rewrites its middle, and waits to be killed.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.native.fallbacks import Fallbacks
from crewagent.bot.native.stream import ReplyStream, ReplyTarget
from crewagent.bot.outbox.courier import Courier
from crewagent.bot.outbox.sqlite_ledger import SqliteLedger
from crewagent.bot.slack_client import PacedWebClient
from crewagent.bot.slack_port import SlackPort
from crewagent.bot.slack_send import CallBudget
from crewagent.bot.status import StatusBoard
from tests.support.fakes import BOT_TOKEN, FakeSlack

KEY = ThreadKey("T1", "C1", "1700000000.000001")
# Streamed as written, then the model's final text says its second sentence differently.
STREAMED = (
    "Keep the weekly report short. Open with what was finished, then the plans for the next week, then the "
    "risks that could block them. "
)
REWRITTEN = (
    "Keep the weekly report short. Open with the three things that matter most, then the plans for the next "
    "week, then the risks that could block them, each with an owner. Send it every Friday before noon."
)


def long_reply(word: str = "Part") -> str:
    """About 2.5 streamed messages of paragraphs, each numbered, with a mention that defusing lengthens."""
    line = "The weekly report lists what was finished, what comes next and the risks, each with <@U2> as owner. "
    return "\n\n".join(f"{word} {index:02d}. {line * 6}" for index in range(48))


def each_once(texts: list[str], word: str = "Part") -> bool:
    """Each paragraph of `long_reply(word)` is in exactly one of `texts`."""
    return all(sum(f"{word} {index:02d}." in text for text in texts) == 1 for index in range(48))


@asynccontextmanager
async def reply_port(api_url: str, outbox: Path) -> AsyncIterator[tuple[SlackPort, Courier]]:
    """A port whose durable messages and streamed replies go through an outbox kept in `outbox`."""
    client = PacedWebClient(token=BOT_TOKEN, base_url=api_url)
    courier = Courier(client, SqliteLedger(outbox))
    await courier.open()
    port = SlackPort(client)
    port.outbox = courier
    try:
        yield port, courier
    finally:
        await courier.close()


def reply_stream(port: SlackPort) -> ReplyStream:
    """A reply streamed into KEY's thread for U1, answering one event; every piece goes out at once."""
    target = ReplyTarget(KEY, "U1", None, answers="event:e1", settles=("e1",))
    board = StatusBoard(port, interval=0.0, rate=0.0)
    return ReplyStream(io=port, board=board, fallbacks=Fallbacks(), budget=CallBudget(6000.0, 1000),
                       target=target, interval=0.0)


async def stream_words(stream: ReplyStream, text: str, piece: int) -> None:
    for start in range(0, len(text), piece):
        await stream.add(text[start : start + piece])


def replies(slack: FakeSlack) -> list[dict[str, Any]]:
    """The bot's messages in KEY's thread, oldest first."""
    found = [m for (channel, _), m in slack.messages.items() if channel == KEY.channel and m.get("user") == "UBOT"]
    return sorted((m for m in found if m.get("thread_ts") == KEY.thread_ts), key=lambda m: float(m["ts"]))


def shown(message: dict[str, Any]) -> str:
    """What a person reads in a reply: its markdown when it has one (an edited reply), else its streamed text."""
    markdown = [b["text"] for b in message.get("blocks") or [] if b.get("type") == "markdown"]
    return "".join(markdown) if markdown else str(message.get("text") or "")


def live_streams(slack: FakeSlack) -> list[tuple[str, str]]:
    return [key for key, state in slack.streams.items() if state == "streaming"]


async def _stream_and_wait(api_url: str, outbox: Path, case: str) -> None:
    """`rewrite`: a reply finished with a text that rewrites its middle; `long`: a long reply cut off while
    its second message streams. Then this process waits to be killed."""
    async with reply_port(api_url, outbox) as (port, _):
        stream = reply_stream(port)
        if case == "rewrite":
            await stream_words(stream, STREAMED, 20)
            await stream.finish(REWRITTEN)
        else:
            await stream_words(stream, long_reply()[:16_000], 700)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(_stream_and_wait(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
