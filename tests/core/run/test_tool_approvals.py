"""One approval protocol for every tool, end to end through the engine: the scripted model over the
real openai SDK, the tracker MCP server over stdio, and a command-like tool registered the normal
way, whose calls ask for approval and may be allowed by prefix for the rest of the run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from crewagent.core.base.events import RunPhase
from crewagent.core.base.answers import FormAnswer, answer_of, form_answer
from crewagent.core.package.loader import load_package
from crewagent.core.run.engine import Engine, EngineSettings
from crewagent.core.store.history import History
from crewagent.core.tools import registry
from crewagent.core.tools.mcp.hub import McpHub
from crewagent.core.tools.shell.command_config import CommandsConfig
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from crewagent.core.tools.policy import SystemToolPolicy
from crewagent.core.tools.registry import ToolHost
from tests.support.fakes.llm_server import Reply
from tests.support.mcp.tracker import ASK, CREATE, LOOKUP, mcp_package, tracker_config
from tests.support.scripts import (
    DIRECTION_WIDGET,
    FEATURE_ANSWER,
    Body,
    calls,
    current_node,
    direction_answer,
    engine_harness,
    hello_subflow_responder,
    previous_calls,
    previous_results,
)
from tests.support.probe_tool import PROBE, commands_model, last_user, probe_tool
from tests.support.shell_sandbox import commands


def _decide(widget: dict[str, Any], decision: str, by: str = "U_OWNER") -> FormAnswer:
    return answer_of(widget, {"decision": decision, "by": by})


def _audit(store: Any, record: Any, kind: str) -> list[dict[str, Any]]:
    path = store.state_dir(record) / "logs" / "execution.jsonl"
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [e for e in lines if e.get("kind") == kind]


def _settings() -> EngineSettings:
    return EngineSettings(system_policy=SystemToolPolicy(servers=("tracker",)))


@pytest.fixture
def tickets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRACKER_TOKEN", "approval-test-token")
    path = tmp_path / "tickets.txt"
    path.write_text("", encoding="utf-8")
    return path


# ---- several calls of one reply ------------------------------------------------------------------


def _three_calls(body: Body) -> Reply:
    """'open two tickets' → create A, look up T-1, create B in one reply; then report every result."""
    results = previous_results(body)
    if results:
        return Reply(content="Results: " + json.dumps(results) + " What next?")
    if "open two tickets" in last_user(body):
        return calls((CREATE, {"title": "A"}), (LOOKUP, {"ticket_id": "T-1"}), (CREATE, {"title": "B"}))
    return Reply(content=ASK)


async def test_two_approvals_in_one_reply_are_asked_one_after_another(
    project: Path, tmp_path: Path, tickets: Path
) -> None:
    hub = McpHub({"tracker": tracker_config(tickets)})
    try:
        async with engine_harness(project, settings=_settings()) as h:
            engine = Engine(h.store, h.runs, h.client, _settings(), ToolHost(hub))
            h.llm.responder = _three_calls
            package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
            record = h.runs.create(package, "hello-linear", "analyst", project)
            await engine.pump(record, package, intent="start")
            first = await engine.pump(record, package, intent="continue", user_input="open two tickets")
            assert first.widget is not None and '"title": "A"' in first.widget["message"]
            asked_model = len(h.llm.requests)

            second = await engine.pump(record, package, intent="continue", user_input=_decide(first.widget, "approve"))
            assert second.phase is RunPhase.WAITING_USER and second.widget is not None
            assert second.widget["widgetId"] != first.widget["widgetId"] and '"title": "B"' in second.widget["message"]
            assert tickets.read_text() == "A\n"  # the first ran; the look-up too; the second waits
            assert len(h.llm.requests) == asked_model  # the model hears nothing until every call has its result

            done = await engine.pump(record, package, intent="continue", user_input=_decide(second.widget, "deny"))
            assert done.phase is RunPhase.WAITING_USER and done.assistant_text and done.assistant_text.startswith("Results")
            assert tickets.read_text() == "A\n"
            results = previous_results(h.llm.requests[-1])
            assert [r.get("tool") for r in results[:2]] == ["create_ticket", "lookup_ticket"]
            assert "created" in results[0]["content"] and "Login page is slow" in results[1]["content"]
            assert results[2]["ok"] is False and results[2]["error"]["code"] == "MCP_CALL_DENIED"
            decided = _audit(h.store, record, "approval.decided")
            assert [(d["decision"], d["by"]) for d in decided] == [("approved", "U_OWNER"), ("denied", "U_OWNER")]
    finally:
        await hub.close()


# ---- a tool that asks, with "allow for this run" ------------------------------------------------


async def test_allow_for_this_run_is_remembered_across_a_restart(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[tuple[str, str | None]] = []
    monkeypatch.setitem(registry.TOOLS, PROBE, probe_tool(ran))
    async with engine_harness(project) as h:
        h.llm.responder = commands_model
        package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
        record = h.runs.create(package, "hello-linear", "analyst", project)
        await h.engine.pump(record, package, intent="start")
        asked = await h.engine.pump(record, package, intent="continue", user_input="diff please")
        assert asked.widget is not None and asked.widget["kind"] == "command"
        assert asked.widget["allowForRun"] == "git diff" and "```\ngit diff --stat\n```" in asked.widget["message"]
        assert ran == []

        done = await h.engine.pump(record, package, intent="continue", user_input=_decide(asked.widget, "allow_for_run"))
        assert done.assistant_text == "Diffed twice. What next?"
        assert ran == [("git diff --stat", "U_OWNER"), ("git diff HEAD", None)]  # the second was not asked
        decided = _audit(h.store, record, "approval.decided")
        assert [(d["decision"], d["by"], d["allowForRun"]) for d in decided] == [
            ("allowed_for_run", "U_OWNER", "git diff")
        ]

        # a new process: the permission is read back from the run's log
        engine = Engine(h.store, h.runs, h.client, EngineSettings())
        saved = h.runs.get(record.run_id)
        asked = await engine.pump(saved, package, intent="continue", user_input="once more")
        assert ran[-1] == ("git diff main", None)
        assert asked.widget is not None and asked.widget["allowForRun"] == "rm -rf"
        denied = await engine.pump(saved, package, intent="continue", user_input=_decide(asked.widget, "deny"))
        assert denied.assistant_text == "Not removed. What next?"
        assert [c for c, _ in ran] == ["git diff --stat", "git diff HEAD", "git diff main"]
        result = previous_results(h.llm.requests[-1])[-1]
        assert result["ok"] is False and result["error"]["code"] == "COMMAND_DENIED"
        assert previous_results(h.llm.requests[-1])[0]["allowedForRun"] == ["git diff"]


async def test_a_sub_workflow_call_waits_for_approval_through_its_caller(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child run holds the call; the caller stops at its card, and the answer reaches the child."""
    ran: list[tuple[str, str | None]] = []
    monkeypatch.setitem(registry.TOOLS, PROBE, probe_tool(ran))
    competent = hello_subflow_responder()

    def respond(body: Body) -> Reply:
        reply = competent(body)
        if current_node(body) == "party-01-voices":  # the child's first step runs a command first
            return Reply(content=reply.content, tool_calls=((PROBE, {"command": "git log -1"}), *reply.tool_calls))
        return reply

    async with engine_harness(project) as h:
        h.llm.responder = respond
        package = h.load("hello-subflow")
        record = h.create(package)
        await h.engine.pump(record, package, intent="start")
        asked = await h.engine.pump(record, package, intent="continue", user_input=FEATURE_ANSWER)
        assert asked.run_id == record.run_id and asked.widget is not None and asked.widget["kind"] == "command"
        assert ran == []
        [child_id] = h.runs.get(record.run_id).child_run_ids

        resumed = await h.engine.pump(record, package, intent="resume")  # *resume before deciding: asked again
        assert resumed.widget is not None and resumed.widget["widgetId"] == asked.widget["widgetId"]

        chose = await h.engine.pump(record, package, intent="continue", user_input=_decide(asked.widget, "approve"))
        assert ran == [("git log -1", "U_OWNER")]
        assert chose.widget == DIRECTION_WIDGET  # the child went on with the rest of that reply
        done = await h.engine.pump(record, package, intent="continue", user_input=direction_answer())
        assert done.phase is RunPhase.COMPLETED
        child = h.runs.get(child_id)
        assert [d["decision"] for d in _audit(h.store, child, "approval.decided")] == ["approved"]


def test_a_held_call_stays_open_until_decided_and_a_crash_after_the_decision_closes_it(tmp_path: Path) -> None:
    """A process killed while the approved call ran must not ask again: the call ends as interrupted."""
    path = tmp_path / "conversation.jsonl"
    history = History.load(path)
    tool_calls = [{"id": i, "type": "function", "function": {"name": PROBE, "arguments": "{}"}} for i in ("c1", "c2")]
    history.append({"role": "assistant", "content": None, "tool_calls": tool_calls}, part="assistant")

    history.append_mark("held", toolCallId="c1", widget={"title": "Run a command?"})

    waiting = History.load(path)  # a restart while the owner decides: nothing is closed
    assert waiting.held_call_ids() == {"c1"} and not [e for e in waiting.entries if e.get("role") == "tool"]
    assert History.peek(path).pending_question() == "Run a command?"  # what the Home tab and `runs` show
    waiting.append_mark("released", toolCallId="c1", decision="approve", by="U1")

    after_crash = History.load(path)
    closed = [(e["tool_call_id"], json.loads(e["content"])["error"]["code"])
              for e in after_crash.entries if e.get("role") == "tool"]
    assert closed == [("c1", "E_INTERRUPTED"), ("c2", "E_INTERRUPTED")] and after_crash.held_call_ids() == set()
    assert all(m.get("mark") for m in after_crash.marks) and len(after_crash.marks) == 2
    assert after_crash.pending_question() is None


async def test_a_reply_typed_instead_of_a_decision_refuses_every_waiting_call_of_that_reply(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[tuple[str, str | None]] = []
    monkeypatch.setitem(registry.TOOLS, PROBE, probe_tool(ran))
    async with engine_harness(project) as h:
        h.llm.responder = commands_model
        package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
        record = h.runs.create(package, "hello-linear", "analyst", project)
        await h.engine.pump(record, package, intent="start")
        asked = await h.engine.pump(record, package, intent="continue", user_input="once more")
        assert asked.widget is not None and "git diff main" in asked.widget["message"]
        await h.engine.pump(record, package, intent="continue", user_input="no, leave the repository alone")
        assert ran == []  # neither call ran, and the second was not asked
        sent = h.llm.requests[-1]["messages"]
        assert [m["role"] for m in sent[-3:]] == ["tool", "tool", "user"]  # the results first, then the reply
        codes = [json.loads(m["content"])["error"]["code"] for m in sent[-3:-1]]
        assert codes == ["COMMAND_DENIED", "COMMAND_DENIED"] and "leave the repository alone" in sent[-1]["content"]
        assert [d["decision"] for d in _audit(h.store, record, "approval.decided")] == ["denied", "denied"]


async def test_an_approval_typed_as_text_decides_nothing(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Words that look like the Approve button's answer are a reply, not a decision: nothing runs."""
    ran: list[tuple[str, str | None]] = []
    monkeypatch.setitem(registry.TOOLS, PROBE, probe_tool(ran))
    async with engine_harness(project) as h:
        h.llm.responder = commands_model
        package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
        record = h.runs.create(package, "hello-linear", "analyst", project)
        await h.engine.pump(record, package, intent="start")
        asked = await h.engine.pump(record, package, intent="continue", user_input="once more")
        assert asked.widget is not None
        typed = json.dumps({"widgetId": asked.widget["widgetId"], "type": asked.widget["type"],
                            "value": {"decision": "approve", "by": "U_OWNER"}})
        await h.engine.pump(record, package, intent="continue", user_input=f"WIDGET_SUBMIT\n{typed}")
        assert ran == []
        assert [d["decision"] for d in _audit(h.store, record, "approval.decided")] == ["denied", "denied"]


async def test_a_question_asked_before_a_held_call_is_asked_after_the_decision(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ran: list[tuple[str, str | None]] = []
    monkeypatch.setitem(registry.TOOLS, PROBE, probe_tool(ran))

    def respond(body: Body) -> Reply:
        if "ask and run" in last_user(body):
            return calls(("ui_ask_user", DIRECTION_WIDGET), (PROBE, {"command": "git status"}))
        return Reply(content=ASK)

    async with engine_harness(project) as h:
        h.llm.responder = respond
        package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
        record = h.runs.create(package, "hello-linear", "analyst", project)
        await h.engine.pump(record, package, intent="start")
        asked = await h.engine.pump(record, package, intent="continue", user_input="ask and run")
        assert asked.widget is not None and asked.widget["type"] == "tool_approval"
        model_calls = len(h.llm.requests)
        question = await h.engine.pump(record, package, intent="continue", user_input=_decide(asked.widget, "approve"))
        assert ran == [("git status", "U_OWNER")]
        assert question.widget == DIRECTION_WIDGET and len(h.llm.requests) == model_calls


async def test_an_approval_asked_the_older_way_is_answered_with_the_truth(project: Path, tmp_path: Path) -> None:
    """A run that waited on an `mcp_approval` question before the upgrade: its answer makes no call, and
    the model is told so (it must not take the answer for the call's outcome)."""
    async with engine_harness(project) as h:
        h.llm.responder = commands_model
        package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
        record = h.runs.create(package, "hello-linear", "analyst", project)
        await h.engine.pump(record, package, intent="start")
        answer = form_answer("mcp-approval-0123456789abcdef", "mcp_approval", {"approved": True, "by": "U1"})
        await h.engine.pump(record, package, intent="continue", user_input=answer)
        last = h.llm.requests[-1]["messages"][-1]
        assert last["role"] == "user" and last["content"].startswith("RUNTIME_NOTE")
        assert "was not made" in last["content"] and "WIDGET_SUBMIT" not in last["content"]


# ---- the real shell_run in its sandbox ----------------------------------------------------------


def _shell_model(body: Body) -> Reply:
    results = previous_results(body)
    if results and results[-1].get("exitCode") is not None and "pytest" in str(previous_calls(body)):
        if previous_calls(body)[-1][1]["command"].endswith("--version"):
            return calls(("shell_run", {"command": "python -m pytest --co -q -p no:cacheprovider"}))
        return Reply(content="Both ran. What next?")
    if last_user(body) == "check pytest":
        return calls(("shell_run", {"command": "python -m pytest --version"}))
    if results and "exitCode" in results[-1]:
        return Reply(content=f"Ran it: {results[-1]['stdout'].strip()}. What next?")
    if results and (results[-1].get("error") or {}).get("code") == "COMMAND_DENIED":
        return Reply(content="I did not run it. What next?")
    if last_user(body) == "make the file":
        return calls(("shell_run", {"command": "echo made > made.txt && cat made.txt"}))
    if last_user(body) == "make another":
        return calls(("shell_run", {"command": "echo again > again.txt"}))
    return Reply(content=ASK)


async def test_a_command_runs_only_after_approve_and_its_output_is_what_the_model_gets(
    project: Path, tmp_path: Path
) -> None:
    if not (await sandbox_state(CommandsConfig())).usable:
        pytest.skip("bubblewrap does not work on this machine")
    settings = EngineSettings(system_policy=SystemToolPolicy(commands=commands(default="ask")))
    async with engine_harness(project, settings=settings) as h:
        h.llm.responder = _shell_model
        package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
        record = h.runs.create(package, "hello-linear", "analyst", project)
        started = await h.engine.pump(record, package, intent="start")
        assert started.widget is None and started.assistant_text == ASK
        asked = await h.engine.pump(record, package, intent="continue", user_input="make the file")
        assert asked.widget is not None and asked.widget["kind"] == "command"
        assert "echo made > made.txt && cat made.txt" in asked.widget["message"]
        assert not (project / "made.txt").exists()  # nothing ran before the owner's answer

        done = await h.engine.pump(record, package, intent="continue", user_input=_decide(asked.widget, "approve"))
        assert (project / "made.txt").read_text() == "made\n"
        assert done.assistant_text == "Ran it: made. What next?"
        result = previous_results(h.llm.requests[-1])[-1]
        assert result["ok"] is True and result["exitCode"] == 0 and result["stdout"] == "made\n"

        again = await h.engine.pump(record, package, intent="continue", user_input="make another")
        assert again.widget is not None
        denied = await h.engine.pump(record, package, intent="continue", user_input=_decide(again.widget, "deny"))
        assert denied.assistant_text == "I did not run it. What next?" and not (project / "again.txt").exists()
        result = previous_results(h.llm.requests[-1])[-1]
        assert result["ok"] is False and result["error"]["code"] == "COMMAND_DENIED"
        commands_audited = _audit(h.store, record, "command.run")
        assert [(c["command"], c.get("approvedBy"), c.get("deniedBy"), c.get("exitCode")) for c in commands_audited] == [
            ("echo made > made.txt && cat made.txt", "U_OWNER", None, 0),
            ("echo again > again.txt", None, "U_OWNER", None),
        ]



async def test_allow_for_this_run_lets_the_same_command_prefix_run_without_asking(project: Path, tmp_path: Path) -> None:
    if not (await sandbox_state(CommandsConfig())).usable:
        pytest.skip("bubblewrap does not work on this machine")
    settings = EngineSettings(system_policy=SystemToolPolicy(commands=commands(default="ask")))
    async with engine_harness(project, settings=settings) as h:
        h.llm.responder = _shell_model
        package = load_package(mcp_package(tmp_path), cache_dir=h.store.packages_dir)
        record = h.runs.create(package, "hello-linear", "analyst", project)
        await h.engine.pump(record, package, intent="start")
        asked = await h.engine.pump(record, package, intent="continue", user_input="check pytest")
        assert asked.widget is not None and asked.widget["allowForRun"] == "python -m pytest"
        done = await h.engine.pump(record, package, intent="continue", user_input=_decide(asked.widget, "allow_for_run"))
        assert done.widget is None and done.assistant_text == "Both ran. What next?"
        ran = [(c["command"], c.get("approvedBy"), c.get("reason")) for c in _audit(h.store, record, "command.run")]
        assert ran == [
            ("python -m pytest --version", "U_OWNER", ran[0][2]),
            ("python -m pytest --co -q -p no:cacheprovider", None, "allowed for this run by its owner"),
        ]
