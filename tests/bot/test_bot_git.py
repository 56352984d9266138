"""Git projects in Slack, end to end: real Bolt app, FakeSlack, scripted model, real git, a bare remote."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from crewagent.bot.config import BotConfig, ConfigError, describe, load_config
from crewagent.bot.logging import JsonFormatter
from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.runs_model import RunRecord
from crewagent.core.store.files import RuntimeStore
from tests.support.fakes import ScriptedLLM
from tests.support.gitrepos import TeamRepo, git, refusing_git_server
from tests.support.scripts import EXAMPLES, create_story_responder
from tests.support.bot_harness import Harness, bot_harness, elements, file_option, file_select, message_text

KEY_A = "1-2-user-authentication"
KEY_B = "1-3-task-board"
TARGET = "artifacts/create-story/target.md"
WAIT = 30.0  # seconds any one awaited Slack call may take on a busy machine (git runs in between)
ADA = {"profile": {"real_name": "Ada Lovelace", "email": "ada@example.invalid"}}


def runs() -> RunManager:
    return RunManager(RuntimeStore())  # the test's CREWAGENT_HOME, as the bot's


def run_of(h: Harness, top: str) -> RunRecord:
    """The run named by the newest button (value) or menu (block id) in the thread that names one."""
    named = [raw for m in h.thread(top) for e in elements(m) for raw in (e.get("value"), e.get("_block_id"))
             if '"r"' in str(raw)]
    run_id = json.loads(named[-1])["r"]
    return runs().get(run_id)


async def start_and_answer(h: Harness, top: str, key: str, user: str = "U1") -> None:
    await h.wait_status(top, "Waiting for your reply", timeout=WAIT)
    await h.reply(top, key, user=user)


def is_pushed(params: dict[str, Any]) -> bool:
    return "Pushed branch" in message_text(params)


def is_refused(params: dict[str, Any]) -> bool:
    return "refused" in message_text(params)


def slack_traffic(h: Harness) -> str:
    methods = ("chat.postMessage", "chat.update", "chat.postEphemeral")
    return "\n".join(json.dumps(params) for m in methods for params in h.slack.calls_to(m))


async def test_two_threads_run_the_same_workflow_on_two_branches_and_push_with_their_authors(
    team_repo: TeamRepo, tmp_path: Path
) -> None:
    llm = ScriptedLLM(responder=create_story_responder(), latency=0.02)
    async with llm, bot_harness(team_repo.clone, llm=llm) as h:
        h.slack.users["U1"] = ADA
        top_a = await h.mention("create-story", user="U1")
        top_b = await h.mention("create-story", user="U2")
        await asyncio.gather(start_and_answer(h, top_a, KEY_A, "U1"), start_and_answer(h, top_b, KEY_B, "U2"))
        await asyncio.gather(*(h.wait_status(top, "Completed", timeout=WAIT) for top in (top_a, top_b)))
        await h.settle()

        run_a, run_b = run_of(h, top_a), run_of(h, top_b)
        assert run_a.worktree and run_b.worktree
        assert run_a.worktree.branch != run_b.worktree.branch
        assert Path(run_a.worktree.path, TARGET).read_text().count(KEY_A) >= 1
        assert KEY_B in Path(run_b.worktree.path, TARGET).read_text()
        assert KEY_A not in Path(run_b.worktree.path, TARGET).read_text(), "one run clobbered the other's file"
        assert not (team_repo.clone / TARGET).exists(), "runs never write into the shared checkout"

        # Posting a file sends the run's own file, from its worktree.
        completion = next(m for m in h.thread(top_b) if "completed." in message_text(m))
        summary = file_option(completion, "artifacts/create-story/summary.md")
        mark = h.mark()
        await h.click(file_select(completion), completion, user="U2", selected=summary)
        await h.slack.wait_for("files.completeUploadExternal", since=mark, timeout=WAIT)
        uploaded = [f for f in h.slack.files.values() if f.completed][-1]
        assert uploaded.content == Path(run_b.worktree.path, "artifacts/create-story/summary.md").read_bytes()
        assert KEY_B.encode() in uploaded.content

        # The completion offers Commit & push, owner-only.
        push_a, completion_a = h.button(top_a, "Commit & push")
        assert run_a.worktree.branch in message_text(completion_a)
        push_b, completion_b = h.button(top_b, "Commit & push")
        mark = h.mark()
        await h.click(push_b, completion_b, user="U1")
        await h.ephemeral("only they", since=mark, user="U1")

        mark = h.mark()
        await h.click(push_a, completion_a, user="U1")
        pushed = await h.slack.wait_for("chat.update", is_pushed, since=mark, timeout=WAIT)
        assert run_a.worktree.branch in message_text(pushed)
        await h.click(push_b, completion_b, user="U2")
        await h.slack.wait_for("chat.update", lambda p: run_b.worktree.branch in message_text(p)
                               and "Pushed branch" in message_text(p), since=mark, timeout=WAIT)
        await h.settle()

        # The completion message now shows the branch as pushed.
        updated = h.slack.messages[("C1", completion_a["ts"])]
        assert "is on the team repository" in message_text(updated)
        assert "Commit & push" not in message_text(updated)
        deliveries = h.bot.engine.store.operator_log.audit_entries()  # the operator's audit: who delivered what
        assert sorted((e.kind, e.person, e.run_id, e.detail["outcome"]) for e in deliveries) == sorted(
            [("delivery", "U1", run_a.run_id, "pushed"), ("delivery", "U2", run_b.run_id, "pushed")]
        )

    assert {run_a.worktree.branch, run_b.worktree.branch} <= set(team_repo.branches())
    assert KEY_A in team_repo.show(run_a.worktree.branch, TARGET)
    assert KEY_B in team_repo.show(run_b.worktree.branch, TARGET)
    assert f"artifacts/stories/{KEY_A}.md" in team_repo.files(run_a.worktree.branch)
    assert team_repo.author(run_a.worktree.branch) == "Ada Lovelace <ada@example.invalid>"
    assert team_repo.author(run_b.worktree.branch) == "User U2 <U2@users.slack.invalid>"
    message = team_repo.message(run_a.worktree.branch)
    assert run_a.run_id in message and "Requested-by: Ada Lovelace (Slack user U1)" in message
    assert team_repo.branches().count("main") == 1 and "sample project" in git(team_repo.remote, "log", "-1", "main")
    traffic = slack_traffic(h)
    assert str(tmp_path) not in traffic and "file://" not in traffic


async def test_remote_branch_moved_is_a_plain_message_and_nothing_is_lost(team_repo: TeamRepo, tmp_path: Path) -> None:
    llm = ScriptedLLM(responder=create_story_responder())
    async with llm, bot_harness(team_repo.clone, llm=llm) as h:
        top = await h.mention("create-story")
        await start_and_answer(h, top, KEY_A)
        await h.wait_status(top, "Completed", timeout=WAIT)
        await h.settle()
        run = run_of(h, top)
        assert run.worktree is not None
        # Someone else pushed a branch of that name first.
        git(team_repo.clone, "push", "--quiet", "origin", f"main:refs/heads/{run.worktree.branch}")
        team_repo.push_from_elsewhere(tmp_path, run.worktree.branch, "notes.md", "theirs\n")
        push, completion = h.button(top, "Commit & push")
        mark = h.mark()
        await h.click(push, completion)
        refused = await h.slack.wait_for("chat.update", is_refused, since=mark, timeout=WAIT)
        assert "moved" in message_text(refused) and "Nothing was lost" in message_text(refused)
        await h.settle()
        assert "Commit & push" in message_text(h.slack.messages[("C1", completion["ts"])]), "still offered"
    assert KEY_A in Path(run.worktree.path, TARGET).read_text()
    assert KEY_A in git(Path(run.worktree.git_dir or ""), "show", f"HEAD:{TARGET}")  # committed on the branch here
    assert TARGET not in team_repo.files(run.worktree.branch)
    assert str(tmp_path) not in slack_traffic(h)


async def test_auto_push_delivers_on_completion(team_repo: TeamRepo) -> None:
    def auto(config: BotConfig) -> None:
        config.default.auto_push = True

    llm = ScriptedLLM(responder=create_story_responder())
    async with llm, bot_harness(team_repo.clone, llm=llm, configure=auto) as h:
        top = await h.mention("create-story")
        mark = h.mark()
        await start_and_answer(h, top, KEY_A)
        await h.slack.wait_for("chat.update", is_pushed, since=mark, timeout=WAIT)
        await h.settle()
        run = run_of(h, top)
    assert run.worktree is not None and run.delivery is not None
    assert KEY_A in team_repo.show(run.worktree.branch, TARGET)


async def test_a_plain_folder_project_works_as_before(project: Path, git_config: Path) -> None:
    llm = ScriptedLLM(responder=create_story_responder())
    async with llm, bot_harness(project, llm=llm) as h:
        top = await h.mention("create-story")
        await start_and_answer(h, top, KEY_A)
        done = await h.posted_text("completed.", timeout=WAIT)
        await h.settle()
        assert "Commit & push" not in message_text(done) and "branch" not in message_text(done)
        run = run_of(h, top)
    assert run.worktree is None
    assert KEY_A in (project / TARGET).read_text()


async def test_no_credentials_or_server_paths_in_slack_or_the_log(
    team_repo: TeamRepo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    llm = ScriptedLLM(responder=create_story_responder())
    async with refusing_git_server() as port:
        git(team_repo.clone, "remote", "set-url", "origin", f"http://bot:hunter2secret@127.0.0.1:{port}/team/app.git")
        async with llm, bot_harness(team_repo.clone, llm=llm) as h:
            top = await h.mention("create-story")
            await h.posted_text("couldn't update from the team repository", timeout=WAIT)  # a refused fetch warns
            await start_and_answer(h, top, KEY_A)
            await h.wait_status(top, "Completed", timeout=WAIT)
            await h.settle()
            push, completion = h.button(top, "Commit & push")
            mark = h.mark()
            await h.click(push, completion)
            refused = await h.slack.wait_for("chat.update", is_refused, since=mark, timeout=WAIT)
            assert "access" in message_text(refused)
            await h.settle()
    traffic = slack_traffic(h)
    for leak in ("hunter2secret", str(tmp_path), f"127.0.0.1:{port}"):
        assert leak not in traffic
    formatter = JsonFormatter()
    logged = "\n".join(formatter.format(record) for record in caplog.records)
    assert "push refused" in logged and "fetch failed" in logged
    assert "hunter2secret" not in logged
    ours = [r for r in caplog.records if r.name.startswith(("crewagent.core.checkout", "crewagent.bot.completion.push"))]
    raw = "\n".join(f"{r.getMessage()} {_extras(r)}" for r in ours)
    assert "hunter2secret" not in raw, "git's words are scrubbed before they are logged at all"
    assert str(tmp_path) not in raw, "git's log lines name no server path"
    shown = [formatter.format(r) for r in caplog.records if r.levelno >= logging.INFO]
    assert not [line for line in shown if str(tmp_path) in line]


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in ("msg", "args")}


def test_config_binds_channels_to_repositories(tmp_path: Path, project: Path) -> None:
    cfg = tmp_path / "crewagent.yml"
    cfg.write_text(
        "repo: https://bot:tok3n@github.com/acme/app.git\nbranch: main\nauto_push: true\n"
        f"packages: [{EXAMPLES / 'create-story-micro'}]\n"
        "git: {timeout: 30, worktree_retention_hours: 1, author_name: Release Bot}\n"
        "channels:\n"
        f"  C2: {{project: {project}, branch: develop}}\n",
        encoding="utf-8",
    )
    config = load_config(config_path=cfg, env={})
    assert config.default.repo == "https://bot:tok3n@github.com/acme/app.git" and config.default.project is None
    assert config.default.branch == "main" and config.default.auto_push
    assert config.channels["C2"].project == project and config.channels["C2"].branch == "develop"
    assert not config.channels["C2"].auto_push
    assert config.git.timeout == 30 and config.git.author_name == "Release Bot"
    assert "tok3n" not in json.dumps(describe(config))

    cfg.write_text(f"project: {project}\nrepo: https://github.com/acme/app.git\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(config_path=cfg, env={})
    assert "not both" in str(err.value)
    cfg.write_text("channels:\n  C2: {branch: main}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(config_path=cfg, env={}, project=project)
    assert "channels.C2" in str(err.value) and "repo" in str(err.value)


async def test_a_repo_binding_is_cloned_at_start_up_and_its_runs_push_there(
    team_repo: TeamRepo, tmp_path: Path
) -> None:
    def bind_repo(config: BotConfig) -> None:
        config.default = config.default.model_copy(update={"project": None, "repo": team_repo.url, "branch": "main"})

    llm = ScriptedLLM(responder=create_story_responder())
    async with llm, bot_harness(team_repo.clone, llm=llm, configure=bind_repo) as h:
        clone = RuntimeStore().home / "checkouts"
        assert any(clone.glob("*/.git")), "cloned before the first event"
        top = await h.mention("create-story")
        await start_and_answer(h, top, KEY_A)
        await h.wait_status(top, "Completed", timeout=WAIT)
        await h.settle()
        push, completion = h.button(top, "Commit & push")
        mark = h.mark()
        await h.click(push, completion)
        await h.slack.wait_for("chat.update", is_pushed, since=mark, timeout=WAIT)
        run = run_of(h, top)
    assert run.worktree is not None and clone in Path(run.project_root).parents
    assert KEY_A in team_repo.show(run.worktree.branch, TARGET)
    assert not (team_repo.clone / TARGET).exists()
