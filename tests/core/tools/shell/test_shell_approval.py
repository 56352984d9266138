"""A command that needs approval, through the engine: held until the owner decides; on Approve it runs in
the sandbox and its real output is the tool result the model gets; on Deny nothing runs (COMMAND_DENIED)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crewagent.core.base.answers import FormAnswer, answer_of
from crewagent.core.package.loader import load_package
from crewagent.core.run.engine import EngineSettings
from crewagent.core.tools.policy import SystemToolPolicy
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from tests.support.fakes.llm_server import Reply
from tests.support.mcp.tracker import mcp_package
from tests.support.probe_tool import last_user
from tests.support.scripts import Body, calls, engine_harness, previous_results
from tests.support.shell_sandbox import commands


def _model(body: Body) -> Reply:
    results = previous_results(body)
    if results:
        return Reply(content="Result: " + json.dumps(results[-1]))
    if last_user(body) == "make it":  # exact: the step's own text may hold any word
        return calls(("shell_run", {"command": "echo made > made.txt && cat made.txt"}))
    if last_user(body) == "again":
        return calls(("shell_run", {"command": "echo twice > second.txt"}))
    return Reply(content="What should I run?")


def _results(h: Any) -> list[dict[str, Any]]:
    """Every tool result the model was sent, in order (each request once: the model answered it)."""
    return [r for request in h.llm.requests for r in previous_results(request)]


def _decide(widget: dict[str, Any], decision: str) -> FormAnswer:
    return answer_of(widget, {"decision": decision, "by": "U_OWNER"})


async def test_a_command_runs_only_after_approve_and_its_output_is_the_result(project: Path, tmp_path: Path) -> None:
    config = commands(default="ask")
    if not (await sandbox_state(config)).usable:
        pytest.skip("bubblewrap does not work on this machine")
    settings = EngineSettings(system_policy=SystemToolPolicy(commands=config))
    async with engine_harness(project, settings=settings) as h:
        h.llm.responder = _model
        package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
        record = h.runs.create(package, "hello-linear", "analyst", project)
        started = await h.engine.pump(record, package, intent="start")
        assert started.widget is None
        asked = await h.engine.pump(record, package, intent="continue", user_input="make it")
        assert asked.widget is not None and asked.widget["kind"] == "command"
        assert "echo made > made.txt" in asked.widget["message"]
        assert asked.widget.get("allowForRun") is None  # its two parts share no first words to allow
        assert not (project / "made.txt").exists()

        done = await h.engine.pump(record, package, intent="continue", user_input=_decide(asked.widget, "approve"))
        result = _results(h)[-1]
        assert result["ok"] is True and result["exitCode"] == 0 and result["stdout"] == "made\n"
        assert (project / "made.txt").read_text() == "made\n" and done.widget is None

        asked = await h.engine.pump(record, package, intent="continue", user_input="again")
        assert asked.widget is not None
        await h.engine.pump(record, package, intent="continue", user_input=_decide(asked.widget, "deny"))
        result = _results(h)[-1]
        assert result["ok"] is False and result["error"]["code"] == "COMMAND_DENIED"
        assert not (project / "second.txt").exists()
        log = h.store.state_dir(record) / "logs" / "execution.jsonl"
        events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
        ran = [e for e in events if e.get("kind") == "command.run"]
        assert [(e["command"], e["approvedBy"], e.get("exitCode"), e.get("deniedBy")) for e in ran] == [
            ("echo made > made.txt && cat made.txt", "U_OWNER", 0, None),
            ("echo twice > second.txt", None, None, "U_OWNER"),  # a denied command is audited too
        ]
