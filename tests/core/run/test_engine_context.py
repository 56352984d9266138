"""Node-scoped context, the stable prompt prefix, usage on the run record and the token budget."""

from __future__ import annotations

import json
from pathlib import Path

from crewagent.core.run.engine import EngineSettings
from crewagent.core.base.events import RunPhase
from crewagent.core.package.loader import load_package
from crewagent.core.store.history import POST_COMPLETION_SCOPE, POST_COMPLETION_WINDOW_TOKENS, History, message_tokens
from crewagent.core.store.runs_model import RunRecord, RunUsage
from tests.support.linear_package import (
    CODENAME_ANSWER,
    CODENAME_QUESTION,
    first_call_of_each_node,
    linear_responder,
    make_linear_package,
    node_id,
)
from tests.support.scripts import STORY_KEY, drive, engine_harness, script_create_story, state_summary, user_inputs

NODES = 8


async def test_a_late_node_gets_the_first_answer_from_the_compact_record(project: Path, tmp_path: Path) -> None:
    async with engine_harness(project) as h:
        h.llm.responder = linear_responder(NODES)
        package = load_package(make_linear_package(tmp_path / "pkg", NODES), cache_dir=h.store.packages_dir)
        record = h.create(package)
        results = await drive(h.engine, record, package, [CODENAME_ANSWER])

        assert [r.phase for r in results] == [RunPhase.WAITING_USER, RunPhase.COMPLETED]
        assert results[0].assistant_text == CODENAME_QUESTION
        summary = (project / "artifacts/linear/summary.md").read_text()
        assert summary.startswith("# BLUE-HERON-42 handbook: summary")

        last = first_call_of_each_node(h.llm.requests)[node_id(NODES, NODES)]
        assert user_inputs(last) == []  # the answer is not in the conversation any more...
        answers = state_summary(last)["userAnswers"]
        assert answers == [{"node": node_id(1, NODES), "answer": CODENAME_ANSWER}]  # ...but quoted here
        roles = [m["role"] for m in last["messages"]]
        assert "assistant" not in roles and "tool" not in roles  # no earlier node's turns
        text = json.dumps(last["messages"])
        assert '"entryNodeId"' not in text  # the graph file read at the first node is not resent

        log = h.store.conversation_log(record).read_text().splitlines()
        assert sum(1 for line in log if CODENAME_ANSWER in line) == 1  # the full log keeps everything
        assert len(log) > 2 * NODES


async def test_prompts_stay_flat_and_share_their_prefix(project: Path, tmp_path: Path) -> None:
    async with engine_harness(project) as h:
        h.llm.responder = linear_responder(NODES)
        package = load_package(make_linear_package(tmp_path / "pkg", NODES), cache_dir=h.store.packages_dir)
        await drive(h.engine, h.create(package), package, [CODENAME_ANSWER])
        firsts = first_call_of_each_node(h.llm.requests)

        sizes = [len(json.dumps(firsts[node_id(n, NODES)]["messages"])) for n in range(2, NODES)]
        assert max(sizes) - min(sizes) < 400  # only the summary's lists grow, not the conversation
        second, third = firsts[node_id(2, NODES)]["messages"], firsts[node_id(3, NODES)]["messages"]
        assert second[:4] == third[:4]  # base rules, tool policy, mode, persona: byte-identical
        directive = next(m["content"] for m in second if m["content"].startswith("RUN_DIRECTIVE"))
        assert directive.rstrip().endswith("- effectiveAgentId: writer")
        assert directive.split("Now:")[0] in next(m["content"] for m in third if m["content"].startswith("RUN_"))


async def test_usage_is_summed_on_the_run_record_and_logged_per_call(project: Path) -> None:
    async with engine_harness(project) as h:
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        await drive(h.engine, record, package, [STORY_KEY])

        saved = h.runs.get(record.run_id)
        assert saved.usage.llm_calls == len(h.llm.requests) == 9
        assert saved.usage.prompt_tokens > 0 and saved.usage.completion_tokens > 0
        assert saved.usage.estimated_calls == 0
        assert saved.usage.line() == f"9 model calls · {saved.usage.total_tokens:,} tokens"
        audit = [json.loads(line) for line in h.store.execution_log(record).read_text().splitlines()]
        per_call = [a["usage"] for a in audit if a.get("kind") == "llm.response"]
        assert len(per_call) == 9
        assert sum(u["prompt_tokens"] for u in per_call) == saved.usage.prompt_tokens


async def test_cached_prompt_tokens_are_counted_when_reported(project: Path) -> None:
    async with engine_harness(project) as h:
        usage = {"prompt_tokens": 1000, "completion_tokens": 10, "total_tokens": 1010,
                 "prompt_tokens_details": {"cached_tokens": 800}}
        h.llm.add_reply(content="Which story?", usage=usage)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        await h.engine.pump(record, package, intent="start")
        assert h.runs.get(record.run_id).usage.cached_prompt_tokens == 800
        assert h.runs.get(record.run_id).usage.line() == "1 model call · 1,010 tokens (800 cached)"


async def test_a_token_budget_pauses_before_it_is_exceeded_and_a_higher_one_resumes(
    project: Path, tmp_path: Path
) -> None:
    async with engine_harness(project, settings=EngineSettings(run_token_budget=30_000)) as h:
        h.llm.responder = linear_responder(NODES)
        package = load_package(make_linear_package(tmp_path / "pkg", NODES), cache_dir=h.store.packages_dir)
        record = h.create(package)
        results = await drive(h.engine, record, package, [CODENAME_ANSWER])

        paused = results[-1]
        assert paused.phase is RunPhase.WAITING_USER and paused.paused
        assert paused.error is not None and paused.error.code == "RUN_TOKEN_BUDGET"
        assert "30,000-token budget" in paused.error.message and "Raise" in paused.error.message
        saved = h.runs.get(record.run_id)
        assert saved.usage.total_tokens <= 30_000
        assert saved.paused and saved.usage.llm_calls == len(h.llm.requests)

        saved.token_budget = 1_000_000
        result = await h.engine.pump(saved, package, intent="resume")
        assert result.phase is RunPhase.COMPLETED
        assert (project / "artifacts/linear/summary.md").read_text().startswith("# BLUE-HERON-42")


def test_old_run_records_load_without_usage() -> None:
    old = {"run_id": "r1", "project_id": "p", "project_root": "/p", "package_id": "k", "package_root": "/k",
           "workflow_id": "w", "active_agent_id": "a", "phase": "completed"}
    record = RunRecord.model_validate(old)
    assert record.usage.llm_calls == 0 and record.token_budget is None


def test_calls_without_reported_usage_are_estimated_and_say_so() -> None:
    usage = RunUsage()
    usage.add({"prompt_tokens": 1_000, "completion_tokens": 50, "total_tokens": 1_050}, 999)
    usage.add(None, 800)
    assert (usage.llm_calls, usage.prompt_tokens, usage.estimated_calls) == (2, 1_800, 1)
    assert usage.line() == "2 model calls · ~1,850 tokens"


def test_post_completion_chat_keeps_a_bounded_window_of_its_own_turns(tmp_path: Path) -> None:
    history = History(tmp_path / "conversation.jsonl")
    history.append({"role": "user", "content": "USER_INPUT\n- forNodeId: end-99\nfinish"}, part="user_input",
                   nodeId="end-99", scope="end-99")
    history.append({"role": "assistant", "content": "done"}, part="assistant", scope="end-99")
    for n in range(60):
        history.append({"role": "user", "content": f"USER_INPUT\nquestion {n} " + "x" * 2_000}, part="user_input",
                       scope=POST_COMPLETION_SCOPE)
        history.append({"role": "assistant", "content": f"answer {n} " + "y" * 2_000}, part="assistant",
                       scope=POST_COMPLETION_SCOPE)

    window = history.scoped_wire(POST_COMPLETION_SCOPE, 100_000)
    assert sum(message_tokens(m) for m in window) <= POST_COMPLETION_WINDOW_TOKENS + 100
    assert window[-1]["content"].startswith("answer 59")
    assert not any(m["content"] in ("done",) or "forNodeId" in m["content"] for m in window)
    assert history.answers == [{"node": "end-99", "answer": "finish"}]  # post-completion chat is not an answer
    assert len(History.peek(tmp_path / "conversation.jsonl")) == 122  # the log keeps everything
