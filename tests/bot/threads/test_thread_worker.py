"""Embedded mode keeps every thread event in the inbox (`<home>/slack/inbox.sqlite`) until the thread's
worker has run it; a new process replays what still waits, oldest first, and skips what was already
decided."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from crewagent.bot.base.event import ThreadEvent
from crewagent.bot.render.modals import decode_context
from crewagent.bot.base.thread import ThreadKey
from crewagent.bot.inbox.file_inbox import FileInbox
from crewagent.bot.threads.thread_worker import ThreadLanes, ThreadWorker
from tests.support.bot_harness import SECRET, WAIT, bot_harness, close_bot, message_text
from tests.support.fakes.slack_events import deliver_event, message_event, new_ts
from tests.support.scripts import FORM_WIDGET, HELLO_LINEAR_ANSWER, hello_linear_responder, user_inputs, user_texts

KEY = ThreadKey("T1", "C1", "1700000000.000100")
OTHER = ThreadKey("T1", "C1", "1700000000.000200")


def text_event(key: ThreadKey, text: str) -> ThreadEvent:
    return ThreadEvent(kind="text", thread=str(key), user="U1", text=text, message_ts=new_ts(), dedupe=[f"msg:{text}"])


def kept_texts(path: Path) -> list[str]:
    """What waits in the file, read the way a new process would (its own connection)."""
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT event FROM crew_inbox WHERE done_at IS NULL ORDER BY seq").fetchall()
    return [ThreadEvent.model_validate_json(row[0]).text for row in rows]


class Recorder:
    """The lane's work for each event: records it, and holds it until `release` is set."""

    def __init__(self, *, fail_on: str | None = None) -> None:
        self.seen: list[str] = []
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.fail_on = fail_on

    async def __call__(self, event: ThreadEvent) -> None:
        self.seen.append(event.text)
        self.started.set()
        await self.release.wait()
        if event.text == self.fail_on:
            raise RuntimeError("this event's work failed")


async def test_an_event_is_kept_before_push_returns_and_forgotten_once_its_thread_ran_it(tmp_path: Path) -> None:
    path = tmp_path / "slack" / "inbox.sqlite"
    lanes = ThreadLanes()
    work = Recorder(fail_on="second")
    pending = ThreadWorker(lanes=lanes, run=work, queue=FileInbox(path))

    await pending.push(text_event(KEY, "first"))
    await pending.push(text_event(KEY, "second"))  # waits behind "first" in the same thread
    await pending.push(text_event(OTHER, "third"))
    assert kept_texts(path) == ["first", "second", "third"]
    await asyncio.wait_for(work.started.wait(), WAIT)
    assert "second" not in work.seen

    work.release.set()
    assert await lanes.idle(WAIT)
    assert sorted(work.seen) == ["first", "second", "third"]
    assert kept_texts(path) == []  # a failed event is done too: it would fail at every start


async def test_a_new_process_replays_what_is_kept_oldest_first(tmp_path: Path) -> None:
    path = tmp_path / "slack" / "inbox.sqlite"
    previous = FileInbox(path)  # the process that died
    for text in ("one", "two", "three"):
        await previous.add(text_event(KEY, text))

    lanes = ThreadLanes()
    work = Recorder()
    work.release.set()
    pending = ThreadWorker(lanes=lanes, run=work, queue=FileInbox(path))
    assert await pending.replay() == 3
    assert await lanes.idle(WAIT)
    assert work.seen == ["one", "two", "three"]
    assert kept_texts(path) == []
    assert await ThreadWorker(lanes=lanes, run=work, queue=FileInbox(path)).replay() == 0


async def test_an_event_that_cannot_be_kept_is_never_run_and_the_error_reaches_the_caller(tmp_path: Path) -> None:
    path = tmp_path / "slack" / "inbox.sqlite"
    path.mkdir(parents=True)  # a directory where the file should be: sqlite cannot open it
    lanes = ThreadLanes()
    work = Recorder()
    pending = ThreadWorker(lanes=lanes, run=work, queue=FileInbox(path))
    with pytest.raises(sqlite3.Error):
        await pending.push(text_event(KEY, "lost?"))
    assert await lanes.idle(WAIT)
    assert work.seen == []  # never run: Slack delivers it again


async def test_a_replayed_text_event_that_was_already_decided_is_skipped(project: Path) -> None:
    """The previous process decided the reply (its dedupe keys are claimed) but died before marking it
    done: the replay skips it, while a reply it never got to still reaches the run."""
    async with bot_harness(project, ("multi-workflows",)) as h:
        h.llm.responder = hello_linear_responder()
        top = await h.start_waiting_run("hello-linear")
        ts = new_ts()
        h.slack.add_message("C1", HELLO_LINEAR_ANSWER, ts=ts, thread_ts=top)
        envelope = message_event(HELLO_LINEAR_ANSWER, ts=ts, thread_ts=top)
        assert await h.event(envelope) == 200
        await h.posted_text("Result: artifacts/hello-linear/result.md")
        assert h.bot is not None
        path = h.bot.engine.store.home / "slack" / "inbox.sqlite"
        await close_bot(h.bot)

        key = ThreadKey(envelope["team_id"], "C1", top)
        later_ts = new_ts()
        question = "Which format did you pick?"
        never_run = ThreadEvent(
            kind="text", thread=str(key), user="U1", text=question, message_ts=later_ts, dedupe=[f"msg:C1:{later_ts}"]
        )
        assert kept_texts(path) == []  # the first process marked done what it ran
        with closing(sqlite3.connect(path)) as db, db:  # as if it had died before marking it done
            db.execute("UPDATE crew_inbox SET done_at = NULL WHERE delivery = ?", (f"msg:C1:{ts}",))
        inbox = FileInbox(path)
        await inbox.add(never_run)
        await inbox.close()

        asked = len(h.llm.requests)
        bot = await h.start()
        assert await bot.idle(WAIT)
        assert kept_texts(path) == []
        after = h.llm.requests[asked:]
        assert [user_inputs(body)[-1] for body in after] == [question]  # only the reply never decided
        assert all(user_inputs(body).count(HELLO_LINEAR_ANSWER) <= 1 for body in h.llm.requests)


async def test_a_replayed_form_answer_that_was_already_decided_is_skipped(project: Path) -> None:
    """A form answer the previous process decided (its `form:` key is claimed) but did not forget is not
    used again; a reply kept behind it still reaches the agent."""
    async with bot_harness(project, ("multi-workflows",)) as h:
        top = await h.mention("Mary")
        await h.posted_text("[1] Run the hello-linear workflow")
        h.llm.add_reply(tool_calls=[("ui_ask_user", FORM_WIDGET)])
        await h.reply(top, "I need help planning")
        await h.posted_text("A few details first.")
        open_form, message = h.button(top, "Open form")
        mark = h.mark()
        await h.click(open_form, message)
        view = (await h.slack.wait_for("views.open", since=mark))["view"]
        await h.settle()
        assert h.bot is not None
        home = h.bot.engine.store.home
        await close_bot(h.bot)

        context = decode_context(view["private_metadata"])
        assert context is not None
        decided = ThreadEvent(
            kind="form", thread=context.s, user="U1", form=context, answer={"name": "TaskNest", "team_size": 4},
            dedupe=["form:decided-before-the-kill"],
        )
        typed = "TaskNest, four people"
        later = ThreadEvent(
            kind="text", thread=context.s, user="U1", text=typed, message_ts=new_ts(), dedupe=[f"msg:{typed}"]
        )
        inbox = FileInbox(home / "slack" / "inbox.sqlite")
        await inbox.add(decided)
        await inbox.add(later)
        assert await inbox.claim(decided)  # what the previous process recorded when it decided the answer
        await inbox.close()

        h.llm.add_reply("Thanks, TaskNest with 4 people it is.")
        asked = len(h.llm.requests)
        bot = await h.start()
        assert await bot.idle(WAIT)
        assert kept_texts(home / "slack" / "inbox.sqlite") == []
        after = h.llm.requests[asked:]
        assert len(after) == 1 and typed in user_texts(after[0])[-1]
        assert "TaskNest" not in "".join(user_texts(after[0])[:-1])  # the form's answer never reached the agent
        shown = next(m for m in h.thread(top) if m["ts"] == message["ts"])
        assert "Answered by" not in message_text(shown)
        assert h.slack.calls_to("chat.postEphemeral") == []  # skipped quietly, no "already answered" note


async def test_a_reply_that_cannot_be_kept_gets_no_ack_and_its_redelivery_is_handled_once(project: Path) -> None:
    async with bot_harness(project, ("multi-workflows",)) as h:
        h.llm.responder = hello_linear_responder()
        top = await h.start_waiting_run("hello-linear")
        assert h.bot is not None
        ts = new_ts()
        h.slack.add_message("C1", HELLO_LINEAR_ANSWER, ts=ts, thread_ts=top)
        envelope = message_event(HELLO_LINEAR_ANSWER, ts=ts, thread_ts=top)
        # Another writer holds the file's write lock (a stuck disk, a backup tool): nothing can be kept.
        with closing(sqlite3.connect(h.bot.engine.store.home / "slack" / "inbox.sqlite", isolation_level=None)) as db:
            db.execute("BEGIN EXCLUSIVE")
            assert await h.event(envelope) == 500  # Slack delivers it again
            db.execute("ROLLBACK")
        assert await h.bot.idle(WAIT)
        assert not any(HELLO_LINEAR_ANSWER in user_inputs(body) for body in h.llm.requests)

        status, _ = await deliver_event(h.http, h.url, SECRET, envelope, retry_num=1)
        assert status == 200
        await h.posted_text("Result: artifacts/hello-linear/result.md")
        answered = [body for body in h.llm.requests if user_inputs(body)[-1:] == [HELLO_LINEAR_ANSWER]]
        assert len(answered) == 1
