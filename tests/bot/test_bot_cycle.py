"""The story cycle in one Slack thread: each completed run offers the package's next step as a button,
which starts it on the same branch; Commit & push opens one pull request on a fake GitHub API.

Real Bolt app, FakeSlack, scripted model, real git with a bare remote, a fake GitHub REST server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crewagent.bot.config import BotConfig
from crewagent.core.api.checkout import ForgeSettings
from crewagent.core.store.files import RuntimeStore
from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.runs_model import RunRecord
from tests.support.bot_harness import Harness, bot_harness, elements, message_text
from tests.support.fakes import ScriptedLLM
from tests.support.fakes.github_api import TOKEN, FakeGitHub, Refusal
from tests.support.gitrepos import TeamRepo, git, origin_on_github
from tests.support.scripts import user_texts
from tests.support.story_cycle import CYCLE_FILES, cycle_workflow, story_cycle_package, story_cycle_responder

WAIT = 30.0


def latest_run(h: Harness, top: str) -> RunRecord:
    named = [raw for m in h.thread(top) for e in elements(m) for raw in (e.get("value"), e.get("_block_id"))
             if '"r"' in str(raw)]
    return RunManager(RuntimeStore()).get(json.loads(named[-1])["r"])


def uses_package(package: Path, forge_url: str | None = None) -> Any:
    def configure(config: BotConfig) -> None:
        config.default.packages = [package]
        if forge_url is not None:
            config.forge = ForgeSettings(api_url=forge_url, token="${CREW_FORGE_TOKEN}")
    return configure


def completions(h: Harness, top: str) -> list[dict[str, Any]]:
    return [m for m in h.thread(top) if "completed." in message_text(m)]


async def next_step(h: Harness, top: str, label: str, done_before: int) -> None:
    """Press the newest next-step button named `label` and wait for that run to complete."""
    button, message = h.button(top, label)
    assert json.loads(button["value"])["x"], "a next-step button names its workflow"
    await h.click(button, message)
    await h.slack.wait_for("chat.postMessage", lambda p: "completed." in message_text(p)
                           and len(completions(h, top)) > done_before, timeout=WAIT)
    await h.settle()


async def test_create_story_then_dev_story_then_code_review_by_button_on_one_branch(
    team_repo: TeamRepo, tmp_path: Path
) -> None:
    package = story_cycle_package(tmp_path)
    llm = ScriptedLLM(responder=story_cycle_responder(), latency=0.01)
    async with llm, bot_harness(team_repo.clone, llm=llm, configure=uses_package(package)) as h:
        top = await h.mention("create-story")
        await h.posted_text("completed.", timeout=WAIT)
        await h.settle()
        story = latest_run(h, top)
        first = completions(h, top)[-1]
        assert [e["text"]["text"] for e in elements(first) if e["action_id"].startswith("crew:next:")] == [
            "Dev Story · Amelia (dev)"]

        await next_step(h, top, "Dev Story", 1)
        dev = latest_run(h, top)
        await next_step(h, top, "Code Review", 2)
        review = latest_run(h, top)
        last = completions(h, top)[-1]
        offered = [e["text"]["text"] for e in elements(last) if e["action_id"].startswith("crew:next:")]
        assert offered == ["Back to Dev Story · Amelia (dev)", "Create Story · Bob (sm)"]
        status = h.status_message(top)
        assert "Cycle so far: create-story ✓ → dev-story ✓ → *code-review*" in message_text(status)

    assert (story.workflow_id, dev.workflow_id, review.workflow_id) == ("create-story", "dev-story", "code-review")
    assert dev.active_agent_id == "dev" and story.active_agent_id == "sm"
    assert story.worktree and dev.worktree and review.worktree
    assert story.worktree.branch == dev.worktree.branch == review.worktree.branch
    assert dev.extra["previous_run_id"] == story.run_id and review.extra["previous_run_id"] == dev.run_id
    for path in CYCLE_FILES.values():  # every step's file is in the one worktree
        assert Path(review.worktree.path, path).is_file()
    told = [t for body in llm.requests if cycle_workflow(body) == "dev-story" for t in user_texts(body)]
    assert any("@project/stories/1-1-login.md" in t and "same git branch" in t for t in told), \
        "dev-story is told where create-story's outputs are"
    assert not (team_repo.clone / CYCLE_FILES["create-story"]).exists(), "runs never write into the shared checkout"


async def test_a_package_without_a_catalog_offers_no_next_step(team_repo: TeamRepo, tmp_path: Path) -> None:
    package = story_cycle_package(tmp_path, catalog=None)
    llm = ScriptedLLM(responder=story_cycle_responder(), latency=0.01)
    async with llm, bot_harness(team_repo.clone, llm=llm, configure=uses_package(package)) as h:
        top = await h.mention("create-story")
        done = await h.posted_text("completed.", timeout=WAIT)
        await h.settle()
    assert "Commit & push" in json.dumps(done)
    assert not [e for e in elements(done) if e["action_id"].startswith("crew:next:")]
    assert "Next step" not in message_text(done)


async def test_stale_forged_and_strangers_next_step_clicks_are_refused(team_repo: TeamRepo, tmp_path: Path) -> None:
    package = story_cycle_package(tmp_path)
    llm = ScriptedLLM(responder=story_cycle_responder(), latency=0.01)
    async with llm, bot_harness(team_repo.clone, llm=llm, configure=uses_package(package)) as h:
        top = await h.mention("create-story")
        await h.posted_text("completed.", timeout=WAIT)
        await h.settle()
        button, message = h.button(top, "Dev Story")

        mark = h.mark()
        await h.click(button, message, user="U2")  # not the thread's owner
        await h.ephemeral("only they", since=mark, user="U2")

        forged = {**button, "value": json.dumps({**json.loads(button["value"]), "x": "code-review"})}
        mark, asked = h.mark(), len(llm.requests)
        await h.click(forged, message)  # a workflow the package does not offer after create-story
        await h.ephemeral("not offered after this run", since=mark)
        await h.settle()
        assert len(completions(h, top)) == 1 and len(llm.requests) == asked

        await next_step(h, top, "Dev Story", 1)
        mark = h.mark()
        await h.click(button, message)  # the first run's button, now that a later run has started
        await h.ephemeral("out of date", since=mark)
        await h.settle()
        assert len(completions(h, top)) == 2


def pushed_or_refused(params: dict[str, Any]) -> bool:
    return "Pushed branch" in message_text(params)


async def deliver(h: Harness, top: str) -> str:
    push, completion = h.button(top, "Commit & push") if any(
        "Commit & push" in json.dumps(m) for m in completions(h, top)[-1:]) else h.button(top, "Push new changes")
    mark = h.mark()
    await h.click(push, completion)
    done = await h.slack.wait_for("chat.update", pushed_or_refused, since=mark, timeout=WAIT)
    await h.settle()
    return message_text(done)


async def test_two_deliveries_of_the_cycle_branch_leave_one_pull_request(
    team_repo: TeamRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    origin_on_github(team_repo, monkeypatch)
    monkeypatch.setenv("CREW_FORGE_TOKEN", TOKEN)
    package = story_cycle_package(tmp_path)
    llm = ScriptedLLM(responder=story_cycle_responder(), latency=0.01)
    async with FakeGitHub() as api, llm:
        async with bot_harness(team_repo.clone, llm=llm, configure=uses_package(package, api.api_url)) as h:
            top = await h.mention("create-story")
            await h.posted_text("completed.", timeout=WAIT)
            await h.settle()
            first = await deliver(h, top)
            await next_step(h, top, "Dev Story", 1)
            second = await deliver(h, top)
            run = latest_run(h, top)
    assert len(api.pulls) == 1, "the second delivery found the open pull request"
    pull = api.pulls[0]
    assert run.worktree is not None and (pull.head, pull.base) == (run.worktree.branch, "main")
    assert (pull.owner, pull.repo) == ("team", "app") and "create-story" in pull.title
    assert "stories/1-1-login.md" in pull.body and "Requested-by" in pull.body
    for text in (first, second):
        assert "View its pull request" in text and "/team/app/pull/1" in text
    assert CYCLE_FILES["dev-story"] in team_repo.files(run.worktree.branch)
    assert TOKEN not in json.dumps(h.slack.calls_to("chat.postMessage") + h.slack.calls_to("chat.update"))


@pytest.mark.parametrize("status", [401, 422, 500, None], ids=["401", "422", "500", "unreachable"])
async def test_a_refusing_or_unreachable_forge_is_said_and_the_branch_stays_pushed(
    team_repo: TeamRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: int | None
) -> None:
    origin_on_github(team_repo, monkeypatch)
    monkeypatch.setenv("CREW_FORGE_TOKEN", TOKEN)
    package = story_cycle_package(tmp_path)
    llm = ScriptedLLM(responder=story_cycle_responder(), latency=0.01)
    api = FakeGitHub(refuse=Refusal(status, "Validation Failed") if status else None)
    async with api, llm:
        configure = uses_package(package, api.api_url)
        if status is None:
            await api.stop()  # nobody listens on its port any more
        async with bot_harness(team_repo.clone, llm=llm, configure=configure) as h:
            top = await h.mention("create-story")
            await h.posted_text("completed.", timeout=WAIT)
            await h.settle()
            said = await deliver(h, top)
            run = latest_run(h, top)
    words = {401: "token was not accepted", 422: "Validation Failed", 500: "failed on its side",
             None: "could not be reached"}[status]
    assert "Pushed branch" in said and "branch is pushed" in said and words in said
    assert run.worktree is not None and CYCLE_FILES["create-story"] in team_repo.files(run.worktree.branch)
    assert "127.0.0.1" not in said and TOKEN not in said
