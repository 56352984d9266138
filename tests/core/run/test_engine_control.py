"""Pause, stop, crash + resume, loop guards and bad model behaviour."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from crewagent.core.document import state as run_state
from crewagent.core.run.engine import Engine, EngineSettings
from crewagent.core.base.events import RunPhase
from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.files import RuntimeStore
from tests.support.fakes.llm_server import Reply
from tests.support.scripts import (
    HELLO_LINEAR_ANSWER,
    STORY_KEY,
    create_story_responder,
    current_node,
    engine_harness,
    hello_linear_responder,
    script_create_story,
)


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def audit(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_killed_between_turns_resumes_without_redoing_nodes(project: Path) -> None:
    async with engine_harness(project) as h:
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        model = create_story_responder()
        release = asyncio.Event()
        hung: list[str | None] = []

        async def respond(body: dict[str, Any]) -> Reply:
            if current_node(body) == "step-04-generate-story" and not hung:
                hung.append(current_node(body))
                await release.wait()  # the process "dies" while this call is in flight
            return model(body)

        h.llm.responder = respond
        first = await h.engine.pump(record, package, intent="start")
        assert first.phase is RunPhase.WAITING_USER
        task = asyncio.create_task(h.engine.pump(record, package, intent="continue", user_input=STORY_KEY))
        while not hung:
            await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        release.set()

        # a new process: fresh store, manager and engine over the same home
        store = RuntimeStore()
        runs = RunManager(store)
        engine = Engine(store, runs, h.client)
        assert [r.run_id for r in engine.interrupted_runs(project)] == [record.run_id]
        saved = runs.get(record.run_id)
        before = len(h.llm.requests)
        result = await engine.pump(saved, package, intent="resume")

        assert result.phase is RunPhase.COMPLETED
        resumed = h.llm.requests[before]
        assert current_node(resumed) == "step-04-generate-story"
        assert "- intent: resume" in "\n".join(m["content"] for m in resumed["messages"] if m["role"] == "user")
        fm = run_state.read_state(store.state_dir(saved))
        assert len(fm["stepsCompleted"]) == len(set(fm["stepsCompleted"])) == 6
        writes = [e["input"]["path"] for e in audit(store.execution_log(saved))
                  if e["kind"] == "tool.exec" and e["toolName"] == "fs.write"]
        assert writes.count("@project/artifacts/create-story/target.md") == 1
        assert writes.count("@project/artifacts/create-story/context.md") == 1
        assert engine.interrupted_runs(project) == []


async def test_pause_finishes_the_turn_then_waits(project: Path) -> None:
    async with engine_harness(project) as h:
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        model = create_story_responder()

        def respond(body: dict[str, Any]) -> Reply:
            if current_node(body) == "step-02-discover-inputs":
                h.engine.request_pause(record.run_id)
            return model(body)

        h.llm.responder = respond
        await h.engine.pump(record, package, intent="start")
        paused = await h.engine.pump(record, package, intent="continue", user_input=STORY_KEY,
                                     on_event=h.record_event)
        assert paused.phase is RunPhase.WAITING_USER and paused.paused
        assert h.kinds("phase_changed")[-1].reason == "Paused"
        fm = run_state.read_state(h.store.state_dir(record))
        assert fm["currentNodeId"] == "step-03-extract-context"  # the turn in progress was finished
        assert h.runs.get(record.run_id).paused is True

        done = await h.engine.pump(record, package, intent="resume")
        assert done.phase is RunPhase.COMPLETED and not done.paused
        assert h.runs.get(record.run_id).paused is False


async def test_stop_abandons_the_call_in_flight_and_stays_resumable(project: Path) -> None:
    async with engine_harness(project) as h:
        package = h.load("multi-workflows")
        record = h.create(package, workflow="hello-linear", agent="analyst")
        model = hello_linear_responder()
        stopped = asyncio.Event()

        async def respond(body: dict[str, Any]) -> Reply:
            if current_node(body) == "step-02-generate" and not stopped.is_set():
                h.engine.request_stop(record.run_id)
                stopped.set()
                await asyncio.sleep(0.2)  # answer only after the client gave up
            return model(body)

        h.llm.responder = respond
        await h.engine.pump(record, package, intent="start")
        result = await h.engine.pump(record, package, intent="continue", user_input=HELLO_LINEAR_ANSWER,
                                     on_event=h.record_event)
        assert result.phase is RunPhase.WAITING_USER and result.paused
        assert h.kinds("phase_changed")[-1].reason == "Stopped"
        assert not (project / "artifacts/hello-linear/result.md").exists()  # the abandoned reply never ran
        assert not h.engine.is_pumping(record.run_id)

        done = await h.engine.pump(record, package, intent="resume")
        assert done.phase is RunPhase.COMPLETED
        assert (project / "artifacts/hello-linear/result.md").is_file()


async def test_pause_and_stop_of_an_idle_run_do_nothing(project: Path) -> None:
    async with engine_harness(project) as h:
        record = h.create(h.load("hello-branch"))
        assert h.engine.request_pause(record.run_id) is False
        assert h.engine.request_stop(record.run_id) is False


async def test_llm_500_and_429_are_retried_then_the_run_goes_on(project: Path) -> None:
    async with engine_harness(project) as h:
        h.llm.add_error(500)
        h.llm.add_error(429)
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        result = await h.engine.pump(h.create(package, agent="sm"), package, intent="start", on_event=h.record_event)
        assert result.phase is RunPhase.WAITING_USER and result.error is None
        retries = h.kinds("llm_retrying")
        assert [(e.attempt, e.reason) for e in retries] == [(1, "HTTP 500"), (2, "HTTP 429")]


async def test_llm_down_fails_with_a_readable_reason_and_retry_works(project: Path) -> None:
    async with engine_harness(project, max_retries=1) as h:
        h.llm.add_error(500)
        h.llm.add_error(500)
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        failed = await h.engine.pump(record, package, intent="start", on_event=h.record_event)

        assert failed.phase is RunPhase.FAILED
        assert failed.error is not None and failed.error.code == "LLM_HTTP_ERROR"
        assert "HTTP 500" in failed.error.message and "OPENAI_BASE_URL" not in failed.error.message
        assert h.kinds("phase_changed")[-1].reason == failed.error.message
        saved = h.runs.get(record.run_id)
        assert saved.phase is RunPhase.FAILED and saved.last_error is not None
        log = h.store.conversation_log(record).read_text()
        assert "LLM_ERROR LLM_HTTP_ERROR" in log

        again = await h.engine.pump(saved, package, intent="continue")
        assert again.phase is RunPhase.WAITING_USER and again.error is None
        assert h.runs.get(record.run_id).last_error is None
        note = [m for m in h.llm.requests[-1]["messages"] if m["role"] == "assistant"][0]
        assert note["content"].startswith("LLM_ERROR")  # kept in context so "continue" makes sense


async def test_unreachable_endpoint_fails_cleanly(project: Path) -> None:
    async with engine_harness(project, max_retries=0) as h:
        package = h.load("hello-branch")
        record = h.create(package)
        await h.llm.stop()
        result = await h.engine.pump(record, package, intent="start")
        assert result.phase is RunPhase.FAILED
        assert result.error is not None and result.error.code == "LLM_HTTP_ERROR"
        assert "could not be reached" in result.error.message and "127.0.0.1" not in result.error.message


async def test_malformed_tool_json_and_unknown_tools_go_back_to_the_model(project: Path) -> None:
    async with engine_harness(project) as h:
        h.llm.add_reply(tool_calls=[("fs_write", '{"path": "@project/artifacts/x.md", "content": ')])
        h.llm.add_reply(tool_calls=[("shell_exec", {"script": "rm -rf /"})])
        h.llm.add_reply(content="I could not do that; what should I do instead?")
        package = h.load("hello-branch")
        record = h.create(package)
        result = await h.engine.pump(record, package, intent="start", on_event=h.record_event)

        assert result.phase is RunPhase.WAITING_USER
        first = tool_results(h.llm.requests[1])
        assert first[-1]["error"]["code"] == "TOOL_ARGS_INVALID_JSON"
        second = tool_results(h.llm.requests[2])
        assert second[-1]["error"]["code"] == "TOOL_NOT_AVAILABLE"
        assert [(e.tool, e.ok, e.error_code) for e in h.kinds("tool_executed")] == [
            ("fs_write", False, "TOOL_ARGS_INVALID_JSON"),
            ("shell_exec", False, "TOOL_NOT_AVAILABLE"),
        ]
        assert not (project / "artifacts/x.md").exists()
        h.llm.assert_consumed()


async def test_runaway_loop_fails_after_the_turn_cap(project: Path) -> None:
    settings = EngineSettings(max_turns_without_progress=5)
    async with engine_harness(project, settings=settings) as h:
        h.llm.responder = lambda body: Reply(tool_calls=(("fs_list", {"path": "@project"}),))
        package = h.load("hello-branch")
        record = h.create(package)
        result = await h.engine.pump(record, package, intent="start")
        assert result.phase is RunPhase.FAILED
        assert result.error is not None and result.error.code == "ENGINE_MAX_TURNS_EXCEEDED"
        assert "5 turns without advancing" in result.error.message
        assert len(h.llm.requests) == 5


async def test_turn_cap_counts_only_turns_without_progress(project: Path) -> None:
    settings = EngineSettings(max_turns_without_progress=2)
    async with engine_harness(project, settings=settings) as h:
        script_create_story(h.llm)  # at most 2 turns per node: a 6-node workflow still finishes
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        await h.engine.pump(record, package, intent="start")
        result = await h.engine.pump(record, package, intent="continue", user_input=STORY_KEY)
        assert result.phase is RunPhase.COMPLETED


async def test_absolute_ceiling_per_input(project: Path) -> None:
    settings = EngineSettings(max_turns_per_pump=3)
    async with engine_harness(project, settings=settings) as h:
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        await h.engine.pump(record, package, intent="start")
        result = await h.engine.pump(record, package, intent="continue", user_input=STORY_KEY)
        assert result.phase is RunPhase.FAILED
        assert result.error is not None and "3 turns for one input" in result.error.message


async def test_repeated_identical_failure_gets_a_nudge_then_stops(project: Path) -> None:
    async with engine_harness(project) as h:
        bad = ("fs_write", {"path": "@pkg/steps/hack.md", "content": "x"})
        h.llm.responder = lambda body: Reply(tool_calls=(bad,))
        package = h.load("hello-branch")
        record = h.create(package)
        result = await h.engine.pump(record, package, intent="start", on_event=h.record_event)

        assert result.phase is RunPhase.WAITING_USER
        assert result.error is not None and result.error.code == "ENGINE_LOOP_DETECTED"
        assert len(h.llm.requests) == 4
        nudges = [m for m in h.llm.requests[3]["messages"] if "RUNTIME_NOTE" in str(m.get("content"))]
        assert len(nudges) == 1 and "3 times" in nudges[0]["content"] and "fs_write" in nudges[0]["content"]
        assert not any("RUNTIME_NOTE" in str(m.get("content")) for m in h.llm.requests[2]["messages"])
        last_phase = h.kinds("phase_changed")[-1]
        assert last_phase.error_code == "ENGINE_LOOP_DETECTED" and "repeating" in (last_phase.reason or "")


async def test_a_pump_cannot_run_twice_at_once(project: Path) -> None:
    async with engine_harness(project) as h:
        gate = asyncio.Event()

        async def slow(body: dict[str, Any]) -> Reply:
            await gate.wait()
            return Reply(content="Hello! Tell me about your project.")

        h.llm.responder = slow
        package = h.load("hello-branch")
        record = h.create(package)
        task = asyncio.create_task(h.engine.pump(record, package, intent="start"))
        await h.llm.wait_for_requests(1)
        assert h.engine.is_pumping(record.run_id)
        try:
            await h.engine.pump(record, package, intent="continue", user_input="hi")
        except Exception as exc:  # noqa: BLE001 - the CrewError is what a surface shows
            assert getattr(exc, "code", None) == "RUN_BUSY"
        else:
            raise AssertionError("a second pump must be refused")
        gate.set()
        assert (await task).phase is RunPhase.WAITING_USER


async def test_a_model_that_never_answers_times_out(project: Path) -> None:
    async with engine_harness(project, max_retries=0, timeout=0.3) as h:
        h.llm.add_delay(2)
        h.llm.add_reply(content="too late")
        package = h.load("hello-branch")
        result = await h.engine.pump(h.create(package), package, intent="start")
        assert result.phase is RunPhase.FAILED
        assert result.error is not None and result.error.code == "LLM_TIMEOUT"
        assert "did not answer in time (1 attempt of 0.3 s each)" in result.error.message


async def test_a_state_file_broken_by_hand_fails_the_run_readably(project: Path) -> None:
    async with engine_harness(project) as h:
        package = h.load("hello-branch")
        record = h.create(package)
        (h.store.state_dir(record) / "workflow.md").write_text("---\nschemaVersion: [\n---\n")
        result = await h.engine.pump(record, package, intent="start")
        assert result.phase is RunPhase.FAILED
        assert result.error is not None and result.error.code == "E_INVALID_FRONTMATTER"
        assert "not valid YAML" in result.error.message
        assert h.runs.get(record.run_id).phase is RunPhase.FAILED
        assert h.llm.requests == []


async def test_a_run_whose_workflow_is_gone_fails_readably(project: Path) -> None:
    async with engine_harness(project) as h:
        package = h.load("hello-branch")
        record = h.create(package)
        record.workflow_id = "no-such-workflow"
        result = await h.engine.pump(record, package, intent="start")
        assert result.phase is RunPhase.FAILED
        assert result.error is not None and result.error.code == "WORKFLOW_NOT_FOUND"
        assert h.runs.get(record.run_id).phase is RunPhase.FAILED
        assert audit(h.store.execution_log(record))[-1]["kind"] == "run.phase"
        assert h.llm.requests == []
