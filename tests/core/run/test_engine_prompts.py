"""Prompt layering (normal vs post-completion), re-anchoring, history budgets, and no server paths."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from crewagent.core.run.engine import EngineSettings
from crewagent.core.store.history import History, HistoryCache, estimate_tokens, fit_messages, message_tokens
from crewagent.core.package.loader import load_package
from crewagent.core.tools.policy import SystemToolPolicy, effective_policy
from crewagent.core.prompts.composer import PromptComposer, render_tool_policy
from crewagent.core.base.events import RunPhase
from tests.support.pipelining import pipelining
from tests.support.scripts import (
    EXAMPLES,
    STORY_KEY,
    create_story_responder,
    current_node,
    drive,
    engine_harness,
    is_post_completion,
    node_brief,
    script_create_story,
    state_summary,
)


def roles_and_heads(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(m["role"], str(m.get("content") or "").split("\n", 1)[0]) for m in body["messages"]]


async def test_normal_run_profile_layers(project: Path) -> None:
    async with engine_harness(project) as h:
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        await drive(h.engine, h.create(package, agent="sm"), package, [STORY_KEY])
        first = h.llm.requests[0]

        heads = roles_and_heads(first)
        assert heads[:6] == [
            ("system", "You are running a CrewAgent v1.1 micro-file workflow inside a runtime that executes your tool calls."),
            ("system", "Tool policy:"),
            ("system", "MODE"),
            ("system", "You are Bob (Scrum Master)."),
            ("user", "RUN_DIRECTIVE"),
            ("user", "NODE_BRIEF"),
        ]
        assert len(heads) == 6  # nothing persisted yet: the anchors are not history
        policy = first["messages"][1]["content"]
        assert "fs: enabled (maxReadBytes=524288, maxWriteBytes=2097152)" in policy
        assert "Prefer fs_apply_patch for state edits" in policy
        assert "fs_read, fs_list, fs_search, fs_write, fs_apply_patch, ui_ask_user, workflow_rewind" in policy
        assert [t["function"]["name"] for t in first["tools"]] == [
            "fs_read", "fs_list", "fs_search", "fs_write", "fs_apply_patch", "ui_ask_user", "workflow_rewind"
        ]
        assert first["tool_choice"] == "auto"
        directive = first["messages"][4]["content"]
        for line in ("- intent: start", "- workflow: create-story-micro", "- graph: @pkg/workflow.graph.json",
                     "- currentNodeId: step-01-select-story", "- effectiveAgentId: sm", "Protocol:"):
            assert line in directive
        brief = first["messages"][5]["content"]
        for line in ("- currentNodeId: step-01-select-story (type=step)",
                     "- stepFile: @pkg/steps/step-01-select-story.md",
                     "  - artifacts/create-story/target.md -> @project/artifacts/create-story/target.md",
                     "  - step-02-discover-inputs (label=next)",
                     "STEP_FILE @pkg/steps/step-01-select-story.md",
                     "## Instructions"):
            assert line in brief
        inlined = brief.split("STEP_FILE", 1)[1].split("STATE_SUMMARY")[0]
        assert '\n---\nschemaVersion: "1.1"' in inlined and 'nodeId: "step-01-select-story"' in inlined  # frontmatter too
        assert state_summary(first)["currentNodeId"] == "step-01-select-story"

        answered = h.llm.requests[2]
        user_input = [m for m in answered["messages"] if m["role"] == "user"][-1]["content"]
        assert user_input == f"USER_INPUT\n- forNodeId: step-01-select-story\n{STORY_KEY}"


async def test_anchors_follow_the_state_on_every_call(project: Path) -> None:
    async with engine_harness(project) as h:
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        await drive(h.engine, h.create(package, agent="sm"), package, [STORY_KEY])

        nodes = [current_node(b) for b in h.llm.requests]
        assert nodes == [
            "step-01-select-story", "step-01-select-story", "step-01-select-story",
            "step-02-discover-inputs", "step-03-extract-context", "step-03-extract-context",
            "step-04-generate-story", "step-05-update-sprint-status", None,
        ]
        for body in h.llm.requests[:-1]:
            assert state_summary(body)["currentNodeId"] == current_node(body)
            assert sum(1 for m in body["messages"] if str(m.get("content", "")).startswith("NODE_BRIEF")) == 1
        summary = state_summary(h.llm.requests[4])
        assert summary["stepsCompleted"] == ["step-01-select-story", "step-02-discover-inputs"]
        assert summary["variables"]["storyKey"] == STORY_KEY


async def test_post_completion_profile_has_no_active_step(project: Path) -> None:
    async with engine_harness(project) as h:
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        await drive(h.engine, record, package, [STORY_KEY])
        await h.engine.pump(record, package, intent="continue", user_input="What did you write?")

        for body in h.llm.requests[-2:]:
            assert is_post_completion(body)
            anchors = [m["content"] for m in body["messages"] if m["role"] == "user" and
                       m["content"].startswith(("RUN_DIRECTIVE", "NODE_BRIEF", "STATE_SUMMARY"))]
            assert len(anchors) == 1
            directive = anchors[0]
            assert "currentNodeId" not in directive
            assert "Protocol (post-run)" in directive and "workflow_state_change_confirm" in directive
            assert not any("STEP_FILE" in str(m.get("content")) for m in body["messages"])
        last_input = [m for m in h.llm.requests[-1]["messages"] if m["role"] == "user"][-1]["content"]
        assert last_input == "USER_INPUT\nWhat did you write?"


async def test_no_server_path_reaches_the_model(project: Path, tmp_path: Path) -> None:
    async with engine_harness(project) as h:
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        await drive(h.engine, record, package, [STORY_KEY])
        h.llm.responder = None
        h.llm.add_reply(tool_calls=[("fs_read", {"path": "/etc/passwd"}), ("fs_list", {"path": "@project/../.."}),
                                    ("fs_read", {"path": "@state/logs/execution.jsonl"})])
        h.llm.add_reply(content="ok")
        await h.engine.pump(record, package, user_input="show me secrets")

        deny = {str(tmp_path), str(tmp_path.resolve()), str(EXAMPLES), str(EXAMPLES.resolve()),
                str(h.store.home), str(project)}
        wire = json.dumps(h.llm.requests)
        for real in deny:
            assert real not in wire, real
        assert "@project/artifacts/create-story/target.md" in wire


def test_large_step_files_are_not_inlined() -> None:
    package = load_package(EXAMPLES / "hello-branch")
    workflow = package.default_workflow
    small = PromptComposer(package).node_brief(workflow, "step-01-intake")
    assert "STEP_FILE @pkg/steps/step-01-intake.md" in small
    tight = PromptComposer(package, step_inline_max_bytes=200).node_brief(workflow, "step-01-intake")
    assert "STEP_FILE" not in tight
    assert "not inlined" in tight and "fs_read @pkg/steps/step-01-intake.md" in tight


def test_decision_and_end_nodes_in_the_brief() -> None:
    package = load_package(EXAMPLES / "hello-branch")
    composer = PromptComposer(package)
    brief = composer.node_brief(package.default_workflow, "decide-02-project-type")
    assert "  - step-03a-greenfield (label=greenfield, conditionText=\"variables.projectType == 'greenfield'\")" in brief
    assert ("  - step-03b-brownfield (label=brownfield, default=true, "
            "conditionText=\"variables.projectType == 'brownfield'\")") in brief
    assert "  - artifacts/intake.md -> @project/artifacts/intake.md" in brief
    end = composer.node_brief(package.default_workflow, "end-99")
    assert "allowedNext: none (end node)" in end and 'workflowStatus to "complete"' in end


def test_tool_policy_text_follows_the_effective_policy() -> None:
    package = load_package(EXAMPLES / "hello-branch")
    analyst = package.agent("analyst")
    policy = effective_policy(SystemToolPolicy(), analyst)
    assert "maxWriteBytes=1048576" in render_tool_policy(policy, ["fs_read"], "run")
    off = effective_policy(SystemToolPolicy(fs_enabled=False), analyst)
    text = render_tool_policy(off, ["ui_ask_user"], "run")
    assert "fs: disabled" in text and "tools you can call: ui_ask_user" in text
    chat = render_tool_policy(policy, ["fs_read", "fs_list", "fs_search", "ui_ask_user"], "chat")
    assert "read-only in this mode" in chat and "fs_apply_patch" not in chat


def test_system_prompt_replaces_the_persona(tmp_path: Path) -> None:
    src = tmp_path / "pkg"
    shutil.copytree(EXAMPLES / "hello-branch", src)
    agents = json.loads((src / "agents.json").read_text())
    agents["agents"][0]["systemPrompt"] = "You are the compiled analyst prompt."
    (src / "agents.json").write_text(json.dumps(agents))
    package = load_package(src)
    layers = PromptComposer(package).system_layers(
        mode="run", agent=package.agent("analyst"), policy=effective_policy(SystemToolPolicy(), None), tool_names=[]
    )
    assert layers[3]["content"] == "You are the compiled analyst prompt."


# ---- history -----------------------------------------------------------------------------


def test_token_estimate_counts_ascii_quarters_and_other_characters_whole() -> None:
    assert estimate_tokens("abcdefgh") == 2
    assert estimate_tokens("abcd需要") == 3
    assert estimate_tokens("") == 0


def _round(n: int, size: int) -> list[dict[str, Any]]:
    call = {"id": f"c{n}", "type": "function", "function": {"name": "fs_read", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": f"c{n}", "content": f"result {n} " + "x" * size},
    ]


def _check_protocol(messages: list[dict[str, Any]]) -> None:
    open_ids: set[str] = set()
    for m in messages:
        if m["role"] == "assistant":
            assert not open_ids, "an assistant message came before all tool results"
            open_ids = {c["id"] for c in m.get("tool_calls") or []}
        elif m["role"] == "tool":
            assert m["tool_call_id"] in open_ids, "orphan tool result"
            open_ids.discard(m["tool_call_id"])


def test_budget_shrinks_old_tool_results_first() -> None:
    messages = [{"role": "user", "content": "USER_INPUT\ngo"}]
    for n in range(6):
        messages += _round(n, 4000)
    total = sum(message_tokens(m) for m in messages)
    fitted = fit_messages(messages, total - 2000)
    assert len(fitted) == len(messages)  # shrinking was enough
    assert "shortened" in fitted[2]["content"] and "shortened" not in fitted[-1]["content"]
    assert sum(message_tokens(m) for m in fitted) <= total - 2000
    _check_protocol(fitted)


def test_budget_drops_oldest_whole_rounds_but_keeps_the_newest_input() -> None:
    messages = [{"role": "user", "content": "USER_INPUT\nfirst"}]
    for n in range(4):
        messages += _round(n, 400)
    messages.append({"role": "assistant", "content": "Which story?"})
    messages.append({"role": "user", "content": "USER_INPUT\nnewest " + "y" * 4000})
    messages += _round(9, 8000)
    fitted = fit_messages(messages, 3500)
    contents = [str(m.get("content")) for m in fitted]
    assert contents[0].startswith("CONTEXT_NOTE")
    assert any(c.startswith("USER_INPUT\nnewest") for c in contents)
    assert fitted[-1]["tool_call_id"] == "c9"  # the round in progress is whole
    assert not any(c.startswith("USER_INPUT\nfirst") for c in contents)
    _check_protocol(fitted[1:])


def test_history_survives_a_torn_line_and_closes_dangling_calls(tmp_path: Path) -> None:
    path = tmp_path / "conversation.jsonl"
    history = History(path)
    history.append({"role": "user", "content": "USER_INPUT\nhi"})
    call = {"id": "call_7", "type": "function", "function": {"name": "fs_write", "arguments": "{}"}}
    history.append({"role": "assistant", "content": None, "tool_calls": [call]})
    with path.open("a") as handle:
        handle.write('{"role": "tool", "tool_call_id": "call_7", "content": "{\\"ok\\"')  # crash mid-write

    loaded = History.load(path)
    wire = loaded.wire(10_000)
    assert [m["role"] for m in wire] == ["user", "assistant", "tool"]
    assert json.loads(wire[-1]["content"])["error"]["code"] == "E_INTERRUPTED"
    assert len(History.load(path)) == 3  # the repair was persisted


def test_history_sends_what_the_budget_fit_would_send(tmp_path: Path) -> None:
    """The history answers from running totals while it fits; it must agree with fit_messages."""
    history = History(tmp_path / "conversation.jsonl")
    for n in range(5):
        for message in _round(n, 2000):
            history.append(message)
    keys = ("role", "content", "tool_calls", "tool_call_id")
    for extra in (
        {"role": "user", "content": "USER_INPUT\nnext"},
        {"role": "tool", "tool_call_id": "stray", "content": "an orphan from a damaged log"},
    ):
        history.append(extra)
        plain = [{k: v for k, v in e.items() if k in keys} for e in history.entries]
        for budget in (100_000, 3000, 600):
            assert history.wire(budget) == fit_messages(plain, budget)
    loaded = History.load(tmp_path / "conversation.jsonl")
    assert loaded.wire(100_000) == history.wire(100_000)
    assert all(m.get("tool_call_id") != "stray" for m in loaded.wire(100_000))


def test_a_kept_history_is_reused_only_while_its_log_is_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "conversation.jsonl"
    cache = HistoryCache()
    first = cache.open(path)
    first.append({"role": "user", "content": "USER_INPUT\nhi"})
    cache.keep(first)
    assert cache.open(path) is first  # the log is as this history left it
    cache.keep(first)
    with path.open("a") as handle:  # someone else appended a message
        handle.write(json.dumps({"role": "assistant", "content": "from elsewhere"}) + "\n")
    reread = cache.open(path)
    assert reread is not first and [m["content"] for m in reread.wire(10_000)] == ["USER_INPUT\nhi", "from elsewhere"]
    assert cache.open(path) is not reread  # not kept (a pump that fails does not keep it): read again
    call = {"id": "c1", "type": "function", "function": {"name": "fs_read", "arguments": "{}"}}
    reread.append({"role": "assistant", "content": None, "tool_calls": [call]})  # a round cut short
    cache.keep(reread)
    reused = cache.open(path)
    assert reused is reread and json.loads(reused.wire(10_000)[-1]["content"])["error"]["code"] == "E_INTERRUPTED"


async def test_large_tool_results_are_kept_in_state_with_a_pointer(project: Path) -> None:
    async with engine_harness(project, settings=EngineSettings(large_result_bytes=1000)) as h:
        h.llm.add_reply(tool_calls=[("fs_read", {"path": "@project/artifacts/epics.md"})])
        h.llm.add_reply(content="Read it.")
        package = h.load("hello-branch")
        record = h.create(package)
        await h.engine.pump(record, package, intent="start")

        tool_message = [m for m in h.llm.requests[1]["messages"] if m["role"] == "tool"][0]["content"]
        assert "[Full output: @state/logs/tool-results/" in tool_message
        alias = tool_message.split("[Full output: ")[1].split(" ")[0]
        saved = h.store.state_dir(record) / alias.removeprefix("@state/")
        full = json.loads(saved.read_text())
        assert full["content"] == (project / "artifacts/epics.md").read_text()
        assert len(tool_message) < 1000


async def test_history_budget_applies_to_real_runs(project: Path) -> None:
    settings = EngineSettings(history_budget_tokens=6000, full_history=True)  # enough history to overflow
    async with engine_harness(project, settings=settings) as h:
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        results = await drive(h.engine, h.create(package, agent="sm"), package, [STORY_KEY])
        assert results[-1].phase.value == "completed"
        for body in h.llm.requests:
            _check_protocol([m for m in body["messages"] if m["role"] in ("assistant", "tool")])
        assert any("shortened" in str(m.get("content")) for m in h.llm.requests[-2]["messages"])
        assert node_brief(h.llm.requests[-2]) is not None


# ---- reads made for the next node in the reply that finishes a node ----------------------------------


def _finishing_reply(history: History) -> None:
    """Node A's last reply: write, move the state to B, then read for B (results tagged as the pump does)."""
    history.append({"role": "user", "content": "USER_INPUT\nstart"}, part="user_input", scope="A")
    calls = [
        {"id": f"c{n}", "type": "function", "function": {"name": name, "arguments": "{}"}}
        for n, name in enumerate(["fs_write", "fs_apply_patch", "fs_read", "fs_read"])
    ]
    history.append({"role": "assistant", "content": "Done with A.", "tool_calls": calls}, part="assistant", scope="A")
    for n, scope in enumerate(["A", "A", "B", "B"]):
        history.append({"role": "tool", "tool_call_id": f"c{n}", "content": f"result {n}"},
                       part="tool_result", scope=scope)


def test_reads_issued_after_the_move_stay_with_the_next_node(tmp_path: Path) -> None:
    history = History.load(tmp_path / "conversation.jsonl")
    _finishing_reply(history)

    wire = history.scoped_wire("B", 100_000)
    assert wire == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "fs_read", "arguments": "{}"}},
            {"id": "c3", "type": "function", "function": {"name": "fs_read", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "c2", "content": "result 2"},
        {"role": "tool", "tool_call_id": "c3", "content": "result 3"},
    ]
    history.append({"role": "assistant", "content": "B needs nothing else."}, part="assistant", scope="B")
    assert history.scoped_wire("B", 100_000)[3:] == [{"role": "assistant", "content": "B needs nothing else."}]
    assert History.load(history.path).scoped_wire("B", 100_000) == history.scoped_wire("B", 100_000)  # resumable
    assert history.scoped_wire("C", 100_000) == []  # a later node keeps nothing of A's reply


def test_results_before_the_move_or_without_a_scope_leave_with_their_node(tmp_path: Path) -> None:
    history = History(None)
    history.append({"role": "assistant", "content": None, "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "fs_read", "arguments": "{}"}},
        {"id": "c1", "type": "function", "function": {"name": "fs_apply_patch", "arguments": "{}"}},
    ]}, part="assistant", scope="A")
    history.append({"role": "tool", "tool_call_id": "c0", "content": "read in A"}, part="tool_result", scope="A")
    history.append({"role": "tool", "tool_call_id": "c1", "content": "moved"}, part="tool_result")  # an older log
    assert history.scoped_wire("B", 100_000) == []


async def test_a_pipelining_model_needs_one_call_per_node(project: Path) -> None:
    async with engine_harness(project) as h:
        h.llm.responder = pipelining(create_story_responder())
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        results = await drive(h.engine, record, package, [STORY_KEY])

        assert results[-1].phase is RunPhase.COMPLETED
        assert len(h.llm.requests) == 9  # as many as with the whole history re-sent
        second = next(b for b in h.llm.requests if current_node(b) == "step-02-discover-inputs")
        turns = [m for m in second["messages"] if m["role"] in ("assistant", "tool")]
        assert [c["function"]["name"] for c in turns[0]["tool_calls"]] == ["fs_read", "fs_read"]  # state, graph
        assert turns[0]["content"] is None  # the finishing reply's words and writes stayed with step 1
        state_read = json.loads(turns[1]["content"])
        assert state_read["path"] == "@state/workflow.md"
        assert "\ncurrentNodeId: step-02-discover-inputs\n" in state_read["content"]
        assert len(turns) == 3  # step 1's own look around (fs_list) left with its node
