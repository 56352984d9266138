"""Streamed replies in the outbox, over the real SDK and the fake Slack: a stream's whole text is recorded
before it is stopped, a stream Slack no longer takes is edited to the whole text instead, and a stream an
earlier process left open is stopped at the next start and kept for the redo of what it answers; a long
reply's parts are each shown once, even when a process died while posting them."""

from __future__ import annotations

from pathlib import Path

from slack_sdk.web.async_client import AsyncWebClient

from crewagent.bot.outbox.courier import Courier
from crewagent.bot.outbox.entry import part_id, with_marker
from crewagent.bot.outbox.sqlite_ledger import SqliteLedger
from tests.support.fakes import BOT_TOKEN, FakeSlack

THREAD = "1700000000.000001"
WHOLE = {"text": "Hello world, this is the whole reply."}


async def started(slack: FakeSlack, first: str = "Hello wor") -> str:
    client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
    response = await client.chat_startStream(
        channel="C1", thread_ts=THREAD, recipient_team_id="T1", recipient_user_id="U1", markdown_text=first
    )
    return str(response["ts"])


def courier(slack: FakeSlack, path: Path) -> Courier:
    return Courier(AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url), SqliteLedger(path))


async def test_a_finished_stream_is_stopped_with_the_rest_of_its_recorded_text(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        sender = courier(slack, tmp_path / "outbox.sqlite")
        await sender.open()
        ts = await started(slack)
        entry = await sender.record_stream("C1", THREAD, ts, "event:e1")
        assert await sender.finish_stream(entry, {"rest": "ld, this is the whole reply.", "whole": WHOLE}, ["e1"]) is None
        assert slack.messages[("C1", ts)]["text"] == WHOLE["text"]
        assert slack.streams[("C1", ts)] == "done"
        assert await sender.ledger.pending() == []
        await sender.close()


async def test_a_stream_slack_no_longer_takes_is_edited_to_the_whole_text(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        sender = courier(slack, tmp_path / "outbox.sqlite")
        await sender.open()
        ts = await started(slack)
        entry = await sender.record_stream("C1", THREAD, ts, "event:e1")
        slack.expire_stream("C1", ts)
        await sender.finish_stream(entry, {"rest": "ld, this is the whole reply.", "whole": WHOLE}, [])
        assert slack.messages[("C1", ts)]["text"] == WHOLE["text"]
        assert [p["ts"] for p in slack.calls_to("chat.update")] == [ts]
        await sender.close()


async def test_a_stream_left_open_is_stopped_at_the_next_start_and_kept_for_its_redo(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        earlier = courier(slack, tmp_path / "outbox.sqlite")
        await earlier.open()
        ts = await started(slack)
        await earlier.record_stream("C1", THREAD, ts, "event:e1")
        await earlier.close()  # as if killed: the stream is still live, its whole text never recorded

        sender = courier(slack, tmp_path / "outbox.sqlite")
        await sender.open()
        assert await sender.settle_streams() == 1
        assert slack.streams[("C1", ts)] == "done"  # no longer looks live
        assert "writing this reply again" in slack.messages[("C1", ts)]["text"]
        assert sender.adopt_stream("run:other") is None
        adopted = sender.adopt_stream("event:e1")
        assert adopted is not None and adopted.target_ts == ts and sender.adopt_stream("event:e1") is None
        await sender.finish_stream(adopted, {"rest": "", "whole": WHOLE}, ["e1"])  # the redo's whole reply
        assert slack.messages[("C1", ts)]["text"] == WHOLE["text"]
        assert await sender.ledger.pending() == []
        await sender.close()


async def test_a_stream_recorded_before_slack_opened_it_is_found_stopped_and_kept_at_the_next_start(
    tmp_path: Path,
) -> None:
    async with FakeSlack() as slack:
        earlier = courier(slack, tmp_path / "outbox.sqlite")
        await earlier.open()
        await earlier.record_stream("C1", THREAD, None, "event:e1")
        ts = await started(slack)  # Slack opened it; the process died before it recorded the message's ts
        client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
        await client.chat_postMessage(channel="C1", thread_ts=THREAD, text="A later message that does not stream")
        await earlier.close()

        sender = courier(slack, tmp_path / "outbox.sqlite")
        await sender.open()
        assert await sender.settle_streams() == 1
        assert slack.streams[("C1", ts)] == "done"
        assert "writing this reply again" in slack.messages[("C1", ts)]["text"]
        adopted = sender.adopt_stream("event:e1")
        assert adopted is not None and adopted.target_ts == ts
        await sender.finish_stream(adopted, {"rest": "", "whole": WHOLE}, ["e1"])
        assert slack.messages[("C1", ts)]["text"] == WHOLE["text"]
        assert await sender.ledger.pending() == []
        await sender.close()


async def test_a_stream_recorded_but_never_opened_is_forgotten_at_the_next_start(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        await started(slack)  # the thread's earlier reply, finished long before
        slack.expire_stream("C1", next(ts for (_, ts) in slack.streams))
        earlier = courier(slack, tmp_path / "outbox.sqlite")
        await earlier.open()
        await earlier.record_stream("C1", THREAD, None, "event:e1")
        await earlier.close()  # died before Slack was asked to open the message

        sender = courier(slack, tmp_path / "outbox.sqlite")
        await sender.open()
        await sender.settle_streams()
        assert sender.adopt_stream("event:e1") is None
        assert await sender.ledger.pending() == []
        await sender.close()


async def test_a_long_reply_whose_process_died_while_posting_its_parts_shows_each_part_once(tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        earlier = courier(slack, tmp_path / "outbox.sqlite")
        await earlier.open()
        ts = await started(slack)
        entry = await earlier.record_stream("C1", THREAD, ts, "event:e1")
        slack.expire_stream("C1", ts)  # as after a crash: the message no longer streams, it is edited
        parts = [{"text": "part two"}, {"text": "part three"}]
        entry.kind, entry.payload = "finish", {"rest": "", "whole": {"text": "part one"}, "more": parts}
        await earlier.ledger.replace(entry)  # the whole reply is recorded ...
        client = AsyncWebClient(token=BOT_TOKEN, base_url=slack.api_url)
        await client.chat_postMessage(channel="C1", thread_ts=THREAD, **with_marker(part_id(entry.id, 1), parts[0]))
        await earlier.close()  # ... and its second part was posted when the process died

        sender = courier(slack, tmp_path / "outbox.sqlite")
        await sender.open()
        assert await sender.idle(30)
        shown = sorted((m for m in slack.messages.values() if m.get("thread_ts") == THREAD), key=lambda m: float(m["ts"]))
        assert [m["text"] for m in shown] == ["part one", "part two", "part three"]
        assert await sender.ledger.pending() == []
        await sender.close()
