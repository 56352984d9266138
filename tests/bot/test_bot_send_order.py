"""What people must read goes out before queued redraws, against the fake Slack Web API (streaming refused).

The edit budget here is almost nothing (one call per ~17 minutes, a burst of 4 of which 2 are kept
for urgent edits), so whatever is not urgent stays queued: the order of the recorded calls, not
their timing, shows what went first.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from crewagent.bot.config import BotConfig
from crewagent.bot.native.fallbacks import STREAM, Fallbacks
from crewagent.bot.native.status_line import StatusLines
from crewagent.bot.native.stream import ReplyStream, ReplyTarget
from crewagent.bot.render.message import SlackMessage
from crewagent.bot.outgoing import Edit
from crewagent.bot.slack_port import SlackPort
from crewagent.bot.slack_send import CallBudget, Priority
from crewagent.bot.status import StatusBoard
from crewagent.bot.base.thread import ThreadKey
from tests.support.fakes import FakeSlack
from tests.support.scripts import script_create_story
from tests.support.bot_harness import bot_harness, message_text

WAIT = 30.0
STARVED = 0.001  # edits per second: nothing but the burst within a test
QUESTION = "Give its key"  # the end of create-story's question


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlack]:
    async with FakeSlack() as fake:
        yield fake


def text(value: str) -> SlackMessage:
    return SlackMessage(text=value)


def updates(slack: FakeSlack) -> list[tuple[str, str]]:
    return [(str(p["ts"]), str(p.get("text"))) for p in slack.calls_to("chat.update")]


async def test_a_final_reply_goes_before_plan_redraws_queued_by_other_threads(slack: FakeSlack) -> None:
    board = StatusBoard(SlackPort(slack.client()), interval=0.0, rate=STARVED, burst=4)
    plans = [await board.post(f"C{i}", "1.0", text(f"plan {i} · v0")) for i in range(4)]
    reply = await board.post("C9", "9.0", text("Which route should we ta"))
    assert reply is not None and all(plans)
    for version in range(1, 4):
        for i, ts in enumerate(plans):
            assert ts is not None
            board.schedule(f"C{i}", ts, lambda i=i, v=version: text(f"plan {i} · v{v}"))
    board.schedule("C9", reply, lambda: text("Which route should we take?"), priority=Priority.URGENT)

    await slack.wait_for("chat.update", lambda p: p["ts"] == reply, timeout=WAIT)
    assert updates(slack)[0] == (reply, "Which route should we take?")  # first, though scheduled last
    assert not await board.idle(0.2)  # the other threads' redraws wait for budget (all but one of them)
    queued = len(plans) - (len(updates(slack)) - 1)
    assert queued >= 3

    await board.close()  # shutdown sends what is left, each plan once, newest drawing only
    sent = updates(slack)
    assert sent[0][0] == reply
    assert sorted(sent[1:]) == sorted((ts, f"plan {i} · v3") for i, ts in enumerate(plans) if ts)


async def test_a_completion_replaces_queued_progress_and_goes_first(slack: FakeSlack) -> None:
    board = StatusBoard(SlackPort(slack.client()), interval=0.0, rate=STARVED, burst=4)
    busy = await board.post("C1", "1.0", text("Running · 0/9"))
    done = await board.post("C2", "2.0", text("Running · 0/9"))
    assert busy and done
    for step in range(1, 9):
        board.schedule("C1", busy, lambda s=step: text(f"Running · {s}/9"))
        board.schedule("C2", done, lambda s=step: text(f"Running · {s}/9"))
    board.schedule("C2", done, lambda: text("Completed · 9/9"), priority=Priority.URGENT, milestone="completed")
    await board.close()
    assert updates(slack) == [(done, "Completed · 9/9"), (busy, "Running · 8/9")]


async def test_every_edit_counts_against_the_same_budget(slack: FakeSlack) -> None:
    io = SlackPort(slack.client())
    board = StatusBoard(io, interval=0.0, rate=STARVED, burst=4)
    ts = await board.post("C1", "1.0", text("question"))
    assert ts is not None and board.room()
    await io.send(Edit("C1", ts, text("Confirmed by @alice")))  # an answered question's outcome, made directly
    await io.send(Edit("C1", ts, text("Confirmed by @alice ✓")))
    assert not board.room()  # what is left is kept for urgent edits
    await board.close()


async def test_clearing_a_finished_threads_line_goes_before_other_lines(slack: FakeSlack) -> None:
    client = slack.client()
    lines = StatusLines(SlackPort(client), Fallbacks(), interval=0, rate=STARVED)
    keys = [ThreadKey("T1", f"C{i}", "1.0") for i in range(4)]
    lines.working(keys[0], "Writing artifacts/a.md")
    await slack.wait_for("assistant.threads.setStatus", timeout=WAIT)
    assert await lines.idle(WAIT)  # one call at a time per thread: this one has returned
    for key in keys[1:]:
        lines.working(key, "Waiting for the model")
    lines.done(keys[0])
    cleared = await slack.wait_for("assistant.threads.setStatus", lambda p: p["status"] == "", timeout=WAIT)
    calls = slack.calls_to("assistant.threads.setStatus")
    assert cleared["channel_id"] == "C0" and calls.index(cleared) == 1
    await lines.close()


def stream(slack: FakeSlack, board: StatusBoard, fallbacks: Fallbacks) -> ReplyStream:
    key = ThreadKey("T1", "C1", "1.0")
    fallbacks.fall_back(str(key), STREAM, "not_allowed")
    return ReplyStream(io=board.io, board=board, fallbacks=fallbacks, budget=CallBudget(100, 20),
                       target=ReplyTarget(key, "U1", None), interval=0.0)


async def test_without_an_edit_to_spare_a_refused_stream_posts_the_reply_whole(slack: FakeSlack) -> None:
    board = StatusBoard(SlackPort(slack.client()), interval=0.0, rate=STARVED, burst=4)
    assert board.io.edit_budget is not None
    board.io.edit_budget.spend(2)  # other threads used what the reserve leaves
    reply = stream(slack, board, Fallbacks())
    for piece in ("Which route ", "should we ", "take?"):
        await reply.add(piece)
    assert not slack.calls_to("chat.postMessage")
    await reply.finish("Which route should we take?")
    posts = slack.calls_to("chat.postMessage")
    assert len(posts) == 1 and "Which route should we take?" in str(posts[0])
    assert not slack.calls_to("chat.update")
    await board.close()


async def test_with_room_a_refused_stream_shows_its_first_words_and_then_the_whole_reply_first(
    slack: FakeSlack,
) -> None:
    board = StatusBoard(SlackPort(slack.client()), interval=0.0, rate=STARVED, burst=4)
    plan = await board.post("C2", "2.0", text("Running · 0/9"))
    assert plan is not None
    reply = stream(slack, board, Fallbacks())
    await reply.add("Which route should we ta")
    first = slack.calls_to("chat.postMessage")[-1]
    assert "Which route should we ta" in str(first)
    for step in range(1, 6):
        board.schedule("C2", plan, lambda s=step: text(f"Running · {s}/9"))
    await reply.finish("Which route should we take?")
    whole = await slack.wait_for("chat.update", lambda p: "take?" in str(p), timeout=WAIT)
    assert slack.calls_to("chat.update").index(whole) == 0
    await board.close()


async def test_in_a_busy_workspace_a_question_is_shown_whole_while_other_threads_redraws_wait(
    project: Path,
) -> None:
    def starved(config: BotConfig) -> None:
        config.limits.status_edits_per_second = STARVED
        config.limits.status_edit_burst = 4
        config.limits.status_update_interval = 0.0

    async with bot_harness(project, configure=starved) as h:
        script_create_story(h.llm)
        h.slack.fail_next("chat.startStream", "not_allowed", times=1000)
        assert h.bot is not None and h.bot.board.io.edit_budget is not None
        h.bot.board.io.edit_budget.spend(4)  # the workspace's edits are spent: only urgent ones may go now

        first = await h.mention("create-story", channel="C2")
        await h.slack.wait_for("chat.postMessage", lambda p: p["channel"] == "C2" and QUESTION in message_text(p))
        plan = h.status_message(first, channel="C2")
        assert "Waiting for your reply" not in message_text(plan)  # its redraw waits for budget

        mark = h.mark()
        await h.mention("create-story", channel="C1")
        question = await h.slack.wait_for(
            "chat.postMessage", lambda p: p["channel"] == "C1" and QUESTION in message_text(p), since=mark
        )
        assert "Which story should I prepare?" in message_text(question)  # whole, in one post
        shown_at = next(i for i, (m, p) in enumerate(h.slack.calls) if p is question)
        assert not [p for p in h.slack.calls_to("chat.update") if p["ts"] == plan["ts"]]  # still queued

        await h.bot.board.close()  # shutdown sends what waited
        redraws = [i for i, (m, p) in enumerate(h.slack.calls) if m == "chat.update" and p["ts"] == plan["ts"]]
        assert redraws and min(redraws) > shown_at
        assert "Waiting for your reply" in message_text(h.status_message(first, channel="C2"))
