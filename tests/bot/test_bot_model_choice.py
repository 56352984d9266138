"""`*model` in a thread: which model the thread uses, switching to another allowed one (its later model
calls name it), refusing any other, who may switch, and the choice kept across a restart and a resume.
Real Bolt app, FakeSlack, scripted model (which records the model each request names)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crewagent.bot.config import BotConfig
from crewagent.core.api.runs import ModelChoice, ModelSpan
from tests.support.bot_harness import bot_harness, message_text
from tests.support.cli_driver import cli
from tests.support.scripts import STORY_KEY, script_create_story

LARGER = "scripted-large"


def two_models(config: BotConfig) -> None:
    config.models = ModelChoice(default="scripted", allowed=["scripted", LARGER])


async def test_model_reports_refuses_and_switches_the_threads_later_calls(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with bot_harness(project, configure=two_models) as h:
        script_create_story(h.llm)
        top = await h.mention("create-story")
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        first = len(h.llm.requests)
        assert {r["model"] for r in h.llm.requests} == {"scripted"}

        mark = h.mark()
        await h.reply(top, "*model")
        said = await h.posted_text("uses the model `scripted`", since=mark)
        assert f"`{LARGER}`" in message_text(said)

        mark = h.mark()
        await h.reply(top, "*model gpt-unheard-of")
        refused = await h.posted_text("not an allowed model", since=mark)
        assert "`scripted`, `scripted-large`" in message_text(refused) and "still `scripted`" in message_text(refused)

        mark = h.mark()
        await h.reply(top, "*model scripted-large", user="U2")  # not the thread's owner
        await h.ephemeral("Only <@U1> or an admin can switch this thread's model", since=mark, user="U2")
        await h.reply(top, "*model", user="U2")  # asking is fine
        await h.posted_text("uses the model `scripted`", since=mark)

        mark = h.mark()
        await h.reply(top, f"*model {LARGER}")
        await h.posted_text(f"Switched to the model `{LARGER}`", since=mark)
        await h.reply(top, STORY_KEY)
        await h.posted_text("completed.", since=mark)
        await h.settle()
        later = [r["model"] for r in h.llm.requests[first:]]
        assert later and set(later) == {LARGER}

        assert h.bot is not None
        run = h.bot.engine.runs.list()[0]
        assert run.model == LARGER
        assert run.models == [
            ModelSpan(model="scripted", first=1, turns=first), ModelSpan(model=LARGER, first=first + 1, turns=len(later))
        ]
        log = [json.loads(line) for line in h.bot.engine.store.execution_log(run).read_text().splitlines()]
        answered = [entry["model"] for entry in log if entry.get("kind") == "llm.response"]
        assert answered == ["scripted"] * first + [LARGER] * len(later)
        code, out, _ = await cli(["runs", "show", run.run_id], "", monkeypatch, capsys)
        shown = f"Models:    scripted (turns 1-{first}), {LARGER} (turns {first + 1}-{first + len(later)})"
        assert code == 0 and shown in out


async def test_the_choice_holds_after_a_restart_and_for_a_resumed_run(project: Path) -> None:
    async with bot_harness(project, configure=two_models) as h:
        script_create_story(h.llm)
        top = await h.mention("create-story")
        await h.wait_status(top, "Waiting for your reply")
        mark = h.mark()
        await h.reply(top, f"*model {LARGER}")
        await h.posted_text(f"Switched to the model `{LARGER}`", since=mark)
        await h.settle()

        await h.restart()  # another process takes the thread up from what was saved
        asked = len(h.llm.requests)
        mark = h.mark()
        await h.reply(top, "*resume")
        await h.llm.wait_for_requests(asked + 1)
        await h.wait_status(top, "Waiting for your reply")
        await h.reply(top, STORY_KEY)
        await h.posted_text("completed.", since=mark)
        await h.settle()
        assert {r["model"] for r in h.llm.requests[asked:]} == {LARGER}

        mark = h.mark()
        await h.reply(top, "*model")
        await h.posted_text(f"uses the model `{LARGER}`", since=mark)
        await h.reply(top, "*help")
        await h.posted_text("*model — say which model this conversation uses", since=mark)
