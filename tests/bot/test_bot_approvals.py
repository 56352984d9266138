"""A command that needs the owner's approval, in Slack: the real Bolt app over FakeSlack, the scripted
model, the real shell_run in its sandbox. The card waits through *stop and a restart; only the owner
decides; the command runs only after Approve, and its output is what the model gets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crewagent.bot.config import BotConfig
from crewagent.core.tools.shell.command_config import CommandsConfig
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from tests.support.bot_harness import bot_harness, element_text, elements, message_text
from tests.support.fakes.llm_server import Reply
from tests.support.mcp.tracker import ASK, mcp_package
from tests.support.probe_tool import last_user
from tests.support.scripts import Body, calls, previous_results
from tests.support.shell_sandbox import commands

OWNER, GUEST = "U1", "U2"
COMMAND = "echo made > made.txt && cat made.txt"


def _with_asking_commands(config: BotConfig) -> None:
    config.tool_policy = config.tool_policy.model_copy(update={"commands": commands(default="ask")})


def _model(seen: list[dict[str, Any]]):
    def respond(body: Body) -> Reply:
        results = previous_results(body)
        if results:
            seen.append(results[-1])
            return Reply(content=f"Ran it, it printed: {str(results[-1].get('stdout', '')).strip()}. What next?")
        if last_user(body) == "make the file":
            return calls(("shell_run", {"command": COMMAND}))
        return Reply(content=ASK)

    return respond


async def test_the_owner_approves_a_command_after_a_restart_and_the_model_gets_its_output(
    project: Path, tmp_path: Path
) -> None:
    if not (await sandbox_state(CommandsConfig())).usable:
        pytest.skip("bubblewrap does not work on this machine")
    seen: list[dict[str, Any]] = []
    async with bot_harness(project, [str(mcp_package(tmp_path))], configure=_with_asking_commands) as h:
        h.llm.responder = _model(seen)
        top = await h.start_waiting_run("hello-linear")
        mark = h.mark()
        await h.reply(top, "make the file")
        await h.posted_text("Run a command?", since=mark)
        await h.settle()
        approve, card = h.button(top, "Approve")
        assert f"```{COMMAND}```" in message_text(card).replace("\n", "") and "Folder: `@project`" in message_text(card)
        assert [element_text(e) for e in elements(card)] == ["Approve", "Deny"]  # a compound command: no prefix
        assert seen == []

        mark = h.mark()
        await h.click(approve, card, user=GUEST)  # someone else: refused privately, nothing runs
        await h.ephemeral("", since=mark, user=GUEST)
        await h.reply(top, "*stop")
        await h.settle()
        await h.restart()
        assert seen == []

        approve, card = h.button(top, "Approve")
        mark = h.mark()
        await h.click(approve, card, user=OWNER)
        await h.posted_text("Ran it, it printed: made. What next?", since=mark)
        await h.settle()
        [result] = seen
        assert result["ok"] is True and result["exitCode"] == 0 and result["stdout"] == "made\n"
        answered = next(m for m in h.thread(top) if m["ts"] == card["ts"])
        assert "Approved by" in message_text(answered) and elements(answered) == []
