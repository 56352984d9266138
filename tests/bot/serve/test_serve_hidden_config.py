"""serve with `--config` inside its plain-folder project: a run's file tools never show or change that
file, with or without `commands:` (start-up hands the config file's path to the engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crewagent.core.tools.shell.command_config import CommandsConfig
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from tests.support.bot_harness import bot_harness, file_option, file_select, message_text
from tests.support.fakes import Reply, ScriptedLLM
from tests.support.hidden_config import SECRET, assert_hidden, config_prober, plain_project_with_config
from tests.support.linear_package import make_linear_package, node_id
from tests.support.scripts import (
    Body, calls, complete_node, current_node, is_post_completion, previous_calls, previous_results,
)


async def test_a_runs_file_tools_cannot_read_or_rewrite_the_config_file(tmp_path: Path) -> None:
    config = plain_project_with_config(tmp_path)
    package = make_linear_package(tmp_path / "pkg", nodes=2)
    seen: dict[str, dict[str, Any]] = {}
    llm = ScriptedLLM(responder=config_prober(seen))
    async with llm, bot_harness(config.parent, packages=[str(package)], llm=llm, config_file=config) as h:
        top = await h.mention("handbook")
        await h.wait_status(top, "Waiting for your reply")
    assert_hidden(seen, config)


def records_the_config_as_an_artifact(body: Body) -> Reply:
    """Finishes the two-node run, listing crewagent.yml among the run's artifacts (a file button for it)."""
    if is_post_completion(body):
        return Reply(content="Done.")
    first, last = node_id(1, 2), node_id(2, 2)
    if current_node(body) == first:
        return calls(complete_node(first, to=last, artifacts=["crewagent.yml"]))
    return calls(complete_node(last, to=None, variables={"workflowStatus": "complete"}))


async def test_the_config_file_is_not_uploaded_as_an_artifact(tmp_path: Path) -> None:
    config = plain_project_with_config(tmp_path)
    package = make_linear_package(tmp_path / "pkg", nodes=2)
    llm = ScriptedLLM(responder=records_the_config_as_an_artifact)
    async with llm, bot_harness(config.parent, packages=[str(package)], llm=llm, config_file=config) as h:
        top = await h.mention("handbook")
        await h.posted_text("completed.")
        await h.settle()
        completion = next(m for m in h.thread(top) if "completed." in message_text(m))
        mark = h.mark()
        await h.click(file_select(completion), completion, selected=file_option(completion, "crewagent.yml"))
        await h.ephemeral("I can't share `crewagent.yml`", since=mark, user="U1")
        await h.settle()
        assert not [f for f in h.slack.files.values() if f.completed]


async def test_with_commands_a_command_cannot_read_or_rewrite_it_either(tmp_path: Path) -> None:
    if not (await sandbox_state(CommandsConfig())).usable:
        pytest.skip("bubblewrap does not work on this machine")
    config = plain_project_with_config(tmp_path)
    text = config.read_text() + "commands: {default: allow}\n"
    config.write_text(text)
    package = make_linear_package(tmp_path / "pkg", nodes=2)
    seen: list[dict[str, Any]] = []

    def respond(body: Body) -> Reply:
        if seen:
            return Reply(content="Looked.")
        if previous_calls(body):
            seen.extend(previous_results(body))
            return Reply(content="Looked.")
        command = "cat @project/crewagent.yml; echo 'commands: {}' > @project/crewagent.yml"
        return calls(("shell_run", {"command": command}), ("fs_read", {"path": "@project/crewagent.yml"}))

    llm = ScriptedLLM(responder=respond)
    async with llm, bot_harness(config.parent, packages=[str(package)], llm=llm, config_file=config) as h:
        top = await h.mention("handbook")
        await h.wait_status(top, "Waiting for your reply")
    shell, read = seen
    assert "exitCode" in shell and SECRET not in str(seen), seen
    assert read["error"]["details"]["reason"] == "hidden path" and config.read_text() == text
