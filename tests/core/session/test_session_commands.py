"""Typed commands a new user reaches for: `*help`, another agent's name, `*dismiss` after a finished run,
and a finished run that wrote no files. In the terminal chat (its own entry point) and in the session
service the Slack bot uses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakes.llm_server import Reply, ScriptedLLM
from tests.support.linear_package import make_linear_package, node_id
from tests.support.scripts import (
    EXAMPLES,
    _post_completion_reply,
    calls,
    complete_node,
    create_story_responder,
    current_node,
    is_post_completion,
)
from tests.support.cli_driver import chat
from tests.support.session_harness import of_kind, session_harness


@pytest.fixture
def scripted_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")


async def test_help_in_the_terminal_lists_every_command_with_quit(
        project: Path, scripted_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code, out = await chat(project, ["*help", "1", "/help", "*quit"])
        assert llm.requests == []  # *help never reaches the model
    assert code == 0
    assert "Type *help for the commands, *quit to leave" in out  # the chat's first line says it exists
    assert "I don't know the command" not in out
    idle, agent = out.split("Pick an agent by number or name, or type `chat`", 1)[1].split("Commands:", 2)[1:]
    for command in ("*menu", "*status", "*pause", "*stop", "*resume", "*dismiss", "*help", "*quit"):
        assert f"\n{command} — " in idle and f"\n{command} — " in agent, command
    assert "*quit — leave the chat" in out and "*handover" not in out
    assert "type another agent's name to switch" in out  # the second *help was asked with an agent picked


async def test_help_in_slack_lists_handover_not_quit(project: Path) -> None:
    async with session_harness(project, "create-story-micro", surface="web") as s:
        [notice] = of_kind(await s.text("*help"), "notice")
        await s.pick("sm")
        [in_agent] = of_kind(await s.control("help"), "notice")  # the same through the bot's control path
        assert s.requests == []
    assert "*handover — give this thread to someone else" in notice.text and "*quit" not in notice.text
    assert "*help — this list" in in_agent.text and in_agent.text.startswith("Pick a menu item")


async def test_another_agents_name_in_agent_mode_switches_to_that_agent(
        project: Path, scripted_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code, out = await chat(project, ["Bob", "Sam", "sm", "*quit"])
        assert llm.requests == []  # no name went to the current agent's chat
    assert code == 0
    greetings = [line for line in out.splitlines() if line.startswith(("🏃 Bob, Scrum Master.", "📝 Sam, Summarizer."))]
    assert [line[2:5] for line in greetings] == ["Bob", "Sam", "Bob"]  # by persona name, then by id


async def test_a_name_that_is_also_a_menu_trigger_stays_with_the_current_agent(project: Path, tmp_path: Path) -> None:
    """Bob's menu item is triggered by "sam": typing it starts Bob's workflow instead of switching to Sam."""
    package = tmp_path / "pkg"
    shutil.copytree(EXAMPLES / "create-story-micro", package)
    agents = json.loads((package / "agents.json").read_text(encoding="utf-8"))
    agents["agents"][0]["menu"][0]["trigger"] = "sam"
    (package / "agents.json").write_text(json.dumps(agents), encoding="utf-8")
    async with session_harness(project, package) as s:
        s.h.llm.responder = create_story_responder()
        await s.pick("sm")
        outputs = await s.text("sam")
        assert of_kind(outputs, "run_started") and s.session.mode == "run" and s.session.agent_id == "sm"
        await s.control("dismiss")
        await s.pick("sm")
        switched = await s.text("summarizer")  # Sam's id is no trigger of Bob's: that one switches
        assert s.session.agent_id == "summarizer" and of_kind(switched, "show_menu")


def _no_files_responder(nodes: int) -> Any:
    """Finishes every node of the linear package without writing a file."""

    numbers = {node_id(n, nodes): n for n in range(1, nodes + 1)}

    def respond(body: dict[str, Any]) -> Reply:
        if is_post_completion(body):
            return _post_completion_reply(body, "Nothing was written.")
        node = current_node(body) or ""
        number = numbers.get(node)
        if number is None:
            return Reply(content=f"(no plan for {node!r})")
        if number == nodes:
            return calls(complete_node(node, to=None, variables={"workflowStatus": "complete"}))
        return calls(complete_node(node, to=node_id(number + 1, nodes)))

    return respond


async def test_a_finished_run_without_files_and_its_dismissal(
        project: Path, tmp_path: Path, scripted_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    package = make_linear_package(tmp_path / "linear", nodes=3)
    async with ScriptedLLM(responder=_no_files_responder(3)) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code, out = await chat(project, ["1", "*dismiss", "*quit"], package=package)
    assert code == 0
    assert "✔ Run complete. No files were written." in out
    assert "Artifacts:" not in out
    [left] = [line for line in out.splitlines() if line.startswith("Left the completed run '")]
    assert left.endswith("'. Type an agent's number or name to pick one.")
    assert "type *resume to continue it" not in out and "It is saved" not in out
