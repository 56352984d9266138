"""MCP tools in runs, end to end through the engine: the scripted model over the real openai SDK,
the tracker server over stdio, the run store on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crewagent.core.base.events import RunPhase
from crewagent.core.package.loader import load_package
from crewagent.core.tools.policy import SystemToolPolicy
from crewagent.core.base.answers import FormAnswer, answer_of
from crewagent.core.run.engine import Engine, EngineSettings
from crewagent.core.tools.mcp.hub import McpHub
from crewagent.core.tools.registry import ToolHost
from tests.support.mcp.tracker import CREATE, CREATED, LOOKED_UP, LOOKUP, NOT_CREATED, TrackerModel, mcp_package, tracker_config
from tests.support.scripts import current_node, engine_harness, system_text

pytestmark = pytest.mark.slow  # real MCP server processes


def _approval(widget: dict, approved: bool, by: str = "U_OWNER") -> FormAnswer:
    decision = "approve" if approved else "deny"
    return answer_of(widget, {"decision": decision, "by": by})


def _tool_messages(request: dict) -> list[dict]:
    """The tool results of the model's previous reply, in order, parsed."""
    out: list[dict] = []
    for message in reversed(request["messages"]):
        if message.get("role") != "tool":
            break
        out.append(json.loads(message["content"]))
    return list(reversed(out))


def _audit(store, record) -> list[dict]:
    path = store.state_dir(record) / "logs" / "execution.jsonl"
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture
def tickets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRACKER_TOKEN", "s3cret-token-value")
    path = tmp_path / "tickets.txt"
    path.write_text("", encoding="utf-8")
    return path


def _settings() -> EngineSettings:
    return EngineSettings(system_policy=SystemToolPolicy(servers=("tracker", "time")))


async def test_lookup_runs_without_asking_and_a_change_waits_for_approval(project: Path, tmp_path: Path, tickets: Path) -> None:
    hub = McpHub({"tracker": tracker_config(tickets)})
    model = TrackerModel()
    try:
        async with engine_harness(project, settings=_settings()) as h:
            h.engine = Engine(h.store, h.runs, h.client, _settings(), ToolHost(hub))
            h.llm.responder = model
            package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
            record = h.runs.create(package, "hello-linear", "analyst", project)
            first = await h.engine.pump(record, package, intent="start")
            assert first.phase is RunPhase.WAITING_USER
            assert LOOKUP in model.offered["step-01-ask"] and CREATE in model.offered["step-01-ask"]
            policy = system_text(h.llm.requests[0])
            assert "- mcp: servers tracker (tools named SERVER__TOOL; a tool that may change something waits" in policy

            looked = await h.engine.pump(record, package, intent="continue", user_input="please look up T-1")
            assert looked.widget is None and looked.assistant_text == LOOKED_UP  # read-only: no question

            asked = await h.engine.pump(record, package, intent="continue", user_input="now open a ticket")
            assert asked.phase is RunPhase.WAITING_USER and asked.widget is not None
            assert asked.widget["type"] == "tool_approval" and asked.widget["tool"] == CREATE
            assert asked.widget["title"] == "Approve a tool call?" and asked.widget["kind"] == "mcp"
            assert "Fix the login page" in asked.widget["message"] and asked.widget["allowForRun"] is None
            assert tickets.read_text() == ""  # nothing happened before the approval
            waiting = h.llm.requests[-1]  # the call waits: the model was not asked again meanwhile

            done = await h.engine.pump(record, package, intent="continue", user_input=_approval(asked.widget, True))
            assert done.assistant_text == CREATED
            assert tickets.read_text() == "Fix the login page\n"
            after = h.llm.requests[h.llm.requests.index(waiting) + 1]
            result = _tool_messages(after)[-1]  # the real outcome is the call's tool message
            assert result["ok"] is True and result["tool"] == "create_ticket" and "Fix the login page" in result["content"]
            assert not any("awaiting_approval" in str(m.get("content")) for m in after["messages"])
            calls = [e for e in _audit(h.store, record) if e.get("kind") == "mcp.call"]
            assert [(c["tool"], c["approvedBy"]) for c in calls] == [
                ("lookup_ticket", "not needed"), ("create_ticket", "U_OWNER")
            ]
            assert all(c["argsHash"].startswith("sha256:") and c["sizeBytes"] > 0 for c in calls)
            decided = [e for e in _audit(h.store, record) if e.get("kind") == "approval.decided"]
            assert [(d["tool"], d["decision"], d["by"]) for d in decided] == [(CREATE, "approved", "U_OWNER")]
            log_text = (h.store.state_dir(record) / "logs" / "execution.jsonl").read_text()
            assert "s3cret-token-value" not in log_text

            # the architect's step: no tracker tools offered, and calling one anyway is refused
            finished = await h.engine.pump(record, package, intent="continue", user_input="go on")
            assert finished.phase is RunPhase.COMPLETED
            assert not any(n.startswith("tracker__") for n in model.offered["step-02-generate"])
            architect = next(r for r in h.llm.requests if current_node(r) == "step-02-generate")
            assert "- mcp: servers time" in system_text(architect)  # its own servers only
            assert model.refusals and model.refusals[0]["error"]["code"] == "TOOL_NOT_AVAILABLE"
            assert tickets.read_text() == "Fix the login page\n"
    finally:
        await hub.close()


async def test_denied_call_is_not_made_and_the_model_is_told(project: Path, tmp_path: Path, tickets: Path) -> None:
    hub = McpHub({"tracker": tracker_config(tickets)})
    model = TrackerModel()
    try:
        async with engine_harness(project, settings=_settings()) as h:
            engine = Engine(h.store, h.runs, h.client, _settings(), ToolHost(hub))
            h.llm.responder = model
            package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
            record = h.runs.create(package, "hello-linear", "analyst", project)
            await engine.pump(record, package, intent="start")
            asked = await engine.pump(record, package, intent="continue", user_input="open a ticket")
            assert asked.widget is not None
            denied = await engine.pump(record, package, intent="continue", user_input=_approval(asked.widget, False))
            assert denied.phase is RunPhase.WAITING_USER and denied.assistant_text == NOT_CREATED
            assert tickets.read_text() == ""
            result = _tool_messages(h.llm.requests[-1])[-1]
            assert result["ok"] is False and result["error"]["code"] == "MCP_CALL_DENIED"
            assert "U_OWNER denied it" in result["error"]["message"]
            decided = [e for e in _audit(h.store, record) if e.get("kind") == "approval.decided"]
            assert [(d["decision"], d["by"]) for d in decided] == [("denied", "U_OWNER")]
            # a second answer to the same question changes nothing
            again = await engine.pump(record, package, intent="continue", user_input=_approval(asked.widget, True))
            assert again.phase is RunPhase.WAITING_USER
            assert tickets.read_text() == ""
    finally:
        await hub.close()


async def test_approval_survives_a_restart(project: Path, tmp_path: Path, tickets: Path) -> None:
    """The question is answered by a new process: a fresh engine, hub and server, the same store."""
    model = TrackerModel()
    async with engine_harness(project, settings=_settings()) as h:
        h.llm.responder = model
        package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
        record = h.runs.create(package, "hello-linear", "analyst", project)
        first_hub = McpHub({"tracker": tracker_config(tickets)})
        try:
            engine = Engine(h.store, h.runs, h.client, _settings(), ToolHost(first_hub))
            await engine.pump(record, package, intent="start")
            asked = await engine.pump(record, package, intent="continue", user_input="open a ticket")
            assert asked.widget is not None
        finally:
            await first_hub.close()
        second_hub = McpHub({"tracker": tracker_config(tickets)})
        try:
            engine = Engine(h.store, h.runs, h.client, _settings(), ToolHost(second_hub))
            saved = h.runs.get(record.run_id)
            assert saved.phase is RunPhase.WAITING_USER
            calls_before = len(h.llm.requests)
            again = await engine.pump(saved, package, intent="resume")  # *resume before deciding: asked again
            assert again.widget is not None and again.widget["widgetId"] == asked.widget["widgetId"]
            assert len(h.llm.requests) == calls_before and tickets.read_text() == ""
            done = await engine.pump(saved, package, intent="continue", user_input=_approval(asked.widget, True))
            assert done.assistant_text == CREATED
            assert tickets.read_text() == "Fix the login page\n"
        finally:
            await second_hub.close()


async def test_typing_instead_of_approving_leaves_the_call_unmade(project: Path, tmp_path: Path, tickets: Path) -> None:
    hub = McpHub({"tracker": tracker_config(tickets)})
    try:
        async with engine_harness(project, settings=_settings()) as h:
            engine = Engine(h.store, h.runs, h.client, _settings(), ToolHost(hub))
            h.llm.responder = TrackerModel()
            package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
            record = h.runs.create(package, "hello-linear", "analyst", project)
            await engine.pump(record, package, intent="start")
            asked = await engine.pump(record, package, intent="continue", user_input="open a ticket")
            assert asked.widget is not None
            await engine.pump(record, package, intent="continue", user_input="never mind, look up T-1")
            request = next(r for r in h.llm.requests if "never mind" in str(r["messages"][-1].get("content")))
            tool = request["messages"][-2]  # the held call's tool message, then what the owner typed
            assert tool["role"] == "tool" and json.loads(tool["content"])["error"]["code"] == "MCP_CALL_DENIED"
            assert tickets.read_text() == ""
    finally:
        await hub.close()
