"""Commands in Slack, end to end: a dev agent runs its worktree's failing tests, fixes the code, runs them
again; the thread shows each command and its output, Show output posts the log, and the branch carries the fix.

Real Bolt app, FakeSlack, scripted model, real git with a bare remote, real bwrap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crewagent.bot.config import BotConfig
from crewagent.core.tools.shell.command_config import CommandsConfig
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from tests.support.fakes import ScriptedLLM
from tests.support.gitrepos import TeamRepo, git
from tests.support.linear_package import make_linear_package, node_id
from tests.support.shell_sandbox import BROKEN, FIXED, PYTEST, TOOLCHAIN, dev_responder
from tests.support.bot_harness import bot_harness, message_text, plan_tasks

WAIT = 60.0


def with_commands(config: BotConfig) -> None:
    commands = CommandsConfig.model_validate({
        "default": "forbid", "rules": [{"prefix": "python -m pytest", "decision": "allow"},
                                       {"prefix": "git diff", "decision": "allow"},
                                       {"prefix": "git remote", "decision": "allow"}],
        "timeout_seconds": 120, "toolchain": list(TOOLCHAIN),
    })
    config.tool_policy = config.tool_policy.model_copy(update={"commands": commands})


async def test_a_dev_agent_fixes_its_worktrees_tests_in_slack(team_repo: TeamRepo, tmp_path: Path) -> None:
    if not (await sandbox_state(CommandsConfig())).usable:
        pytest.skip("bubblewrap does not work on this machine")
    clone = team_repo.clone
    (clone / "calc.py").write_text(BROKEN)
    (clone / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    git(clone, "add", "-A")
    git(clone, "commit", "--quiet", "-m", "calc with a bug")
    git(clone, "push", "--quiet", "origin", "main")
    package = make_linear_package(tmp_path / "pkg", nodes=2)
    seen: list[dict[str, Any]] = []
    llm = ScriptedLLM(responder=dev_responder(seen, then="git diff --stat && git remote -v"))
    async with llm, bot_harness(clone, packages=[str(package)], llm=llm, configure=with_commands) as h:
        top = await h.mention("handbook")
        await h.wait_status(top, "Completed", timeout=WAIT)
        await h.settle()
        texts = [message_text(m) for m in h.thread(top)]
        failing = next(t for t in texts if f"`{PYTEST}`" in t and "exit 1" in t)
        assert "1 failed" in failing and ":x:" in failing
        passing = next(t for t in texts if f"`{PYTEST}`" in t and "exit 0" in t)
        assert "1 passed" in passing and ":white_check_mark:" in passing
        assert str(tmp_path) not in json.dumps(h.thread(top))
        details = json.dumps(plan_tasks(h.status_message(top))[node_id(1, 2)].get("details"), ensure_ascii=False)
        assert f"$ {PYTEST} · exit 0" in details  # the command's line in the run's plan

        show, message = h.button(top, "Show output", newest=False)  # the first command that ran: exit 1
        assert "exit 1" in message_text(message)
        mark = h.mark()
        await h.click(show, message)
        await h.slack.wait_for("files.completeUploadExternal", since=mark, timeout=WAIT)
        uploaded = [f for f in h.slack.files.values() if f.completed][-1]
        assert b"1 failed" in uploaded.content and str(tmp_path).encode() not in uploaded.content

        push, completion = h.button(top, "Commit & push")
        mark = h.mark()
        await h.click(push, completion)
        await h.slack.wait_for("chat.update", lambda p: "Pushed branch" in message_text(p), since=mark, timeout=WAIT)
    forbidden, first, second, diff = seen
    assert forbidden["error"]["code"] == "COMMAND_FORBIDDEN" and first["exitCode"] == 1 and second["exitCode"] == 0
    assert diff["exitCode"] == 0 and "calc.py" in diff["stdout"], diff  # git inside sees the run's own repository,
    assert "remote.git" not in diff["stdout"] and "origin" not in diff["stdout"]  # and no remote
    branch = next(b for b in team_repo.branches() if b != "main")
    assert team_repo.show(branch, "calc.py") == FIXED  # the run's branch carries the fix
    assert "test_calc.py" in team_repo.files(branch)  # the forbidden rm never ran


async def test_serve_says_in_one_line_whether_the_sandbox_works(project: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    with caplog.at_level(logging.INFO, logger="crewagent.core.tools.registry"):
        async with bot_harness(project, configure=with_commands):
            pass
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("commands: ")]
    assert len(lines) == 1
    assert "sandbox bubblewrap ready" in lines[0] or "does not work here" in lines[0]



async def test_serve_says_whether_the_sandbox_works_before_slack_is_reached(project: Path) -> None:
    """Slack unreachable (a port nobody listens on): start-up retries it, but the sandbox line is already out."""
    import asyncio
    import logging

    from crewagent.bot.serve.app import build
    from crewagent.core.model.client import LLMSettings
    from tests.support.bot_harness import make_config
    from tests.support.fakes import FakeSlack

    async with FakeSlack() as slack:
        config = make_config(slack, project, ["create-story-micro"])
    config.slack.api_url = slack.api_url  # its server has stopped: nothing answers there now
    with_commands(config)
    said = asyncio.Event()
    loop = asyncio.get_running_loop()

    class Heard(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("commands: "):
                loop.call_soon_threadsafe(said.set)

    heard, logger = Heard(), logging.getLogger("crewagent.core.tools.registry")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(heard)
    bot = build(config, llm_settings=LLMSettings(model="scripted", base_url="http://127.0.0.1:9/v1", max_retries=0))
    starting = asyncio.create_task(bot.start_http("127.0.0.1", 0))
    try:
        await asyncio.wait_for(said.wait(), WAIT)
        assert not starting.done() and not bot._token_checked  # still trying to reach Slack
    finally:
        logger.removeHandler(heard)
        logger.setLevel(level)
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await bot.close(grace=0)
