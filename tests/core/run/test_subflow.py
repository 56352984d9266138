"""Sub-workflow nodes: the caller starts a child run, waits for it, and goes on with its outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crewagent.bot.render import blocks
from crewagent.bot.render.plan import plan_block
from crewagent.core.document import state as run_state
from crewagent.core.store.database import open_pool
from crewagent.core.run.engine import Engine, PumpResult
from crewagent.core.base.events import EngineEvent, NodeStarted, PhaseChanged, RunPhase, SubworkflowReturned, SubworkflowStarted
from crewagent.core.store.history import History
from crewagent.core.model.client import LLMClient, LLMSettings
from crewagent.core.package.loader import load_package, validate_path
from crewagent.core.package.models import Package
from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.runs_model import RunRecord, RunSnapshot, RunWorktree
from crewagent.core.store.postgres import PostgresRuntimeStore
from tests.support.scripts import (
    DIRECTION_WIDGET,
    FEATURE_ANSWER,
    PARTY_ARTIFACTS,
    PLAN_FEATURE_ARTIFACTS,
    EngineHarness,
    complete_node,
    current_node,
    direction_answer,
    drive,
    engine_harness,
    hello_subflow_responder,
)
from tests.support.fakes.llm_server import ErrorReply, Reply, ReplyLike, ScriptedLLM
from tests.support.bot_harness import artifact_paths, bot_harness, is_status, message_text
from tests.support.package_files import edit_json, make_multi_package, step_text
from tests.support.paths import EXAMPLES

PARENT_NODES = ["step-01-brief", "sub-02-party-mode", "step-03-plan", "end-99"]
CHILD_NODES = ["party-01-voices", "party-02-choose", "party-99-wrap"]


def _state(h: EngineHarness, record: RunRecord) -> dict:
    return run_state.read_state(h.store.state_dir(h.runs.get(record.run_id)))


def _start(h: EngineHarness) -> tuple[Package, RunRecord]:
    h.llm.responder = hello_subflow_responder()
    package = h.load("hello-subflow")
    return package, h.create(package)  # no --workflow: the bmad.json entry (plan-feature)


async def test_subworkflow_runs_nested_and_returns_its_outputs(project: Path) -> None:
    async with engine_harness(project) as h:
        package, record = _start(h)
        assert record.workflow_id == "plan-feature"
        results = await drive(h.engine, record, package, [FEATURE_ANSWER, direction_answer()],
                              on_event=h.record_event)

        # the caller stopped twice: its own question, then the child's widget (answered through the caller)
        assert [r.phase for r in results] == [RunPhase.WAITING_USER, RunPhase.WAITING_USER, RunPhase.COMPLETED]
        assert results[1].widget == DIRECTION_WIDGET and results[1].run_id == record.run_id
        assert sum(r.llm_calls for r in results) == 7 == len(h.llm.requests)

        parent = h.runs.get(record.run_id)
        [child_id] = parent.child_run_ids
        assert parent.child_run_id is None  # nothing pending any more
        child = h.runs.get(child_id)
        assert (child.parent_run_id, child.parent_node_id, child.workflow_id) == (
            record.run_id, "sub-02-party-mode", "party-mode")
        assert child.project_id == parent.project_id and child.phase is RunPhase.COMPLETED
        assert (child.usage.llm_calls, parent.usage.llm_calls) == (3, 7)  # the caller's usage covers its child
        assert h.store.state_dir(child) != h.store.state_dir(parent)

        fm = _state(h, record)
        assert fm["stepsCompleted"] == PARENT_NODES
        assert fm["variables"]["direction"] == "simple-rules"  # graph node outputs: copied back
        assert fm["variables"]["discussionPath"] == "artifacts/party-mode/discussion.md"
        assert "topic" not in fm["variables"]  # a child variable not in `outputs` stays in the child
        assert fm["artifacts"] == PLAN_FEATURE_ARTIFACTS
        child_fm = _state(h, child)
        assert child_fm["variables"]["featureName"] == "recurring-tasks"  # passVariables
        assert child_fm["stepsCompleted"] == CHILD_NODES
        for rel in PLAN_FEATURE_ARTIFACTS:
            assert (project / rel).is_file()

        # the child's model saw why it was called; the caller's model never ran the subworkflow node
        child_requests = [b for b in h.llm.requests if current_node(b) in CHILD_NODES]
        first = "\n".join(str(m.get("content")) for m in child_requests[0]["messages"])
        assert "SUBWORKFLOW_CALL" in first and "Round-table (party mode)" in first and "recurring-tasks" in first
        assert not [b for b in h.llm.requests if current_node(b) == "sub-02-party-mode"]
        after = next(b for b in h.llm.requests if current_node(b) == "step-03-plan")
        assert any("sub-workflow \"Party Mode\"" in str(m.get("content")) for m in after["messages"])

        # events: the child's carry the caller as parent; start and return are announced
        nodes = [(e.node_id, e.parent_run_id) for e in h.events if isinstance(e, NodeStarted)]
        assert nodes == [("step-01-brief", None), ("sub-02-party-mode", None),
                         ("party-01-voices", record.run_id), ("party-02-choose", record.run_id),
                         ("party-99-wrap", record.run_id), ("step-03-plan", None), ("end-99", None)]
        started = [e for e in h.events if isinstance(e, SubworkflowStarted)]
        assert [(e.child_run_id, e.resumed) for e in started] == [(child_id, False), (child_id, True)]
        [back] = [e for e in h.events if isinstance(e, SubworkflowReturned)]
        assert back.variables == {"direction": "simple-rules", "discussionPath": "artifacts/party-mode/discussion.md"}
        assert back.artifacts == PARTY_ARTIFACTS
        child_phases = [e.phase for e in h.events if isinstance(e, PhaseChanged) and e.run_id == child_id]
        assert child_phases[-1] is RunPhase.COMPLETED


# ---- validation ------------------------------------------------------------------------------------


def _make_call(root: Path, workflow: str, node: str, ref: str | None) -> None:
    """Turn `node` of workflows/<workflow> into a subworkflow node calling `ref` (None: no ref)."""
    edit_json(root / f"workflows/{workflow}/workflow.graph.json",
              lambda g: next(n for n in g["nodes"] if n["id"] == node).update(type="subworkflow"))
    extra = f'subworkflowRef: "{ref}"\n' if ref is not None else ""
    (root / f"workflows/{workflow}/steps/{node}.md").write_text(
        step_text(node, "subworkflow", extra=extra), encoding="utf-8")


def _errors(root: Path) -> list[tuple[str, str, str, str]]:
    package, problems = validate_path(root)
    errors = [(p.file, p.json_path, p.code, p.message) for p in problems if p.level == "error"]
    assert (package is None) == bool(errors)
    assert all(p.fix for p in problems)
    return errors


def test_a_valid_call_validates_and_the_example_package_too(tmp_path: Path) -> None:
    root = make_multi_package(tmp_path / "pkg")
    _make_call(root, "alpha", "step-03a", "beta")
    assert _errors(root) == []
    assert _errors(EXAMPLES / "hello-subflow") == []


@pytest.mark.parametrize(
    ("ref", "message", "fix_part"),
    [
        (None, "subworkflow node 'step-03a' does not say which workflow it runs", "subworkflowRef: <workflow id>"),
        ("gamma", "subworkflowRef 'gamma' is not a workflow of this package", "alpha, beta"),
    ],
)
def test_a_missing_or_unknown_ref_is_an_error_with_file_path_and_fix(
    tmp_path: Path, ref: str | None, message: str, fix_part: str
) -> None:
    root = make_multi_package(tmp_path / "pkg")
    _make_call(root, "alpha", "step-03a", ref)
    package, problems = validate_path(root)
    [problem] = [p for p in problems if p.level == "error"]
    assert (problem.file, problem.json_path, problem.code) == (
        "workflows/alpha/steps/step-03a.md", "$.subworkflowRef", "SUBWORKFLOW_REF_INVALID")
    assert problem.message == message and fix_part in problem.fix and package is None


def test_a_workflow_calling_itself_directly_or_through_another_is_an_error(tmp_path: Path) -> None:
    root = make_multi_package(tmp_path / "pkg")
    _make_call(root, "alpha", "step-03a", "alpha")
    [(file, path, code, message)] = _errors(root)
    assert (file, path, code) == ("workflows/alpha/steps/step-03a.md", "$.subworkflowRef", "SUBWORKFLOW_CYCLE")
    assert "(alpha → alpha)" in message

    root = make_multi_package(tmp_path / "pkg2")
    _make_call(root, "alpha", "step-03a", "beta")
    _make_call(root, "beta", "step-03b", "alpha")
    errors = _errors(root)
    assert {(f, c) for f, _, c, _ in errors} == {
        ("workflows/alpha/steps/step-03a.md", "SUBWORKFLOW_CYCLE"),
        ("workflows/beta/steps/step-03b.md", "SUBWORKFLOW_CYCLE"),
    }
    assert any("(alpha → beta → alpha)" in m for *_, m in errors)


def test_pass_variables_must_be_names(tmp_path: Path) -> None:
    root = make_multi_package(tmp_path / "pkg")
    _make_call(root, "alpha", "step-03a", "beta")
    path = root / "workflows/alpha/steps/step-03a.md"
    path.write_text(path.read_text().replace("subworkflowRef", "passVariables: {a: 1}\nsubworkflowRef"))
    [(file, json_path, _, message)] = _errors(root)
    assert (file, json_path) == ("workflows/alpha/steps/step-03a.md", "$.passVariables") and "list" in message


def test_a_call_with_no_way_forward_is_an_error(tmp_path: Path) -> None:
    root = make_multi_package(tmp_path / "pkg")
    _make_call(root, "alpha", "step-03a", "beta")
    edit_json(root / "workflows/alpha/workflow.graph.json",
              lambda g: g.update(edges=[e for e in g["edges"] if e["from"] != "step-03a"]))
    [(file, path, code, message)] = _errors(root)
    assert (file, path, code) == ("workflows/alpha/workflow.graph.json", "$.nodes[2]", "GRAPH_INTEGRITY_INVALID")
    assert "no outgoing edge" in message


def test_a_ref_on_a_plain_step_is_a_warning(tmp_path: Path) -> None:
    root = make_multi_package(tmp_path / "pkg")
    (root / "workflows/alpha/steps/step-03a.md").write_text(
        step_text("step-03a", "step", extra='subworkflowRef: "beta"\n'), encoding="utf-8")
    package, problems = validate_path(root)
    assert package is not None
    assert [(p.level, p.json_path) for p in problems] == [("warning", "$.subworkflowRef")]


# ---- control across the pair ----------------------------------------------------------------------


async def _to_the_call(h: EngineHarness, package: Package, record: RunRecord, on_event=None) -> PumpResult:  # noqa: ANN001
    """Start, answer the brief's question: the caller moves to the subworkflow node and pumps the child."""
    first = await h.engine.pump(record, package, intent="start")
    assert first.phase is RunPhase.WAITING_USER and first.widget is None
    return await h.engine.pump(record, package, intent="continue", user_input=FEATURE_ANSWER, on_event=on_event)


async def test_pause_reaches_the_child_and_resume_of_the_caller_resumes_it(project: Path) -> None:
    async with engine_harness(project) as h:
        package, record = _start(h)
        busy: list[bool] = []

        async def pause_in_child(event: EngineEvent) -> None:
            if isinstance(event, NodeStarted) and event.node_id == "party-01-voices":
                child_id = h.runs.get(record.run_id).child_run_id or ""
                busy.append(h.engine.is_pumping(record.run_id) and h.engine.is_pumping(child_id))
                assert h.engine.request_pause(record.run_id)  # the caller's control is the child's too

        paused = await _to_the_call(h, package, record, on_event=pause_in_child)
        assert busy == [True]
        assert (paused.phase, paused.paused, paused.run_id) == (RunPhase.WAITING_USER, True, record.run_id)
        parent = h.runs.get(record.run_id)
        child = h.runs.get(parent.child_run_id or "")
        assert parent.paused and child.paused and child.phase is RunPhase.WAITING_USER
        assert _state(h, child)["currentNodeId"] == "party-02-choose"  # the turn in flight finished first

        snap = h.runs.snapshot(parent, package)
        assert [(s.workflow_name, s.current_node_id) for s in snap.chain()] == [
            ("Plan a Feature", "sub-02-party-mode"), ("Party Mode", "party-02-choose")]
        assert h.engine.interrupted_runs() == []  # neither is running; a child is never listed anyway

        calls_before = len(h.llm.requests)
        asked = await h.engine.pump(parent, package, intent="resume")
        assert asked.widget == DIRECTION_WIDGET and not asked.paused
        assert [current_node(b) for b in h.llm.requests[calls_before:]] == ["party-02-choose"]
        done = await h.engine.pump(parent, package, intent="continue", user_input=direction_answer("calendar-sync"))
        assert done.phase is RunPhase.COMPLETED
        fm = _state(h, parent)
        assert fm["variables"]["direction"] == "calendar-sync" and fm["stepsCompleted"] == PARENT_NODES
        assert h.runs.get(record.run_id).child_run_ids == [child.run_id]  # resumed, never a second child


async def test_stop_by_the_child_id_stops_both_and_a_child_finished_alone_returns_on_resume(project: Path) -> None:
    async with engine_harness(project) as h:
        package, record = _start(h)

        async def stop_child(event: EngineEvent) -> None:
            if isinstance(event, PhaseChanged) and event.parent_run_id and event.phase is RunPhase.RUNNING:
                assert h.engine.request_stop(event.run_id)

        stopped = await _to_the_call(h, package, record, on_event=stop_child)
        assert (stopped.phase, stopped.paused) == (RunPhase.WAITING_USER, True)
        parent = h.runs.get(record.run_id)
        assert parent.last_error is None and parent.paused
        child = h.runs.get(parent.child_run_id or "")
        assert _state(h, child)["stepsCompleted"] == []  # stopped before its first turn

        asked = await h.engine.pump(parent, package, intent="resume")
        assert asked.widget == DIRECTION_WIDGET
        # the child is answered and finished on its own (a surface bound to it): it does not go on alone
        alone = await h.engine.pump(h.runs.get(child.run_id), package, intent="continue", user_input=direction_answer())
        assert alone.phase is RunPhase.COMPLETED
        assert _state(h, parent)["currentNodeId"] == "sub-02-party-mode"
        calls_before = len(h.llm.requests)
        done = await h.engine.pump(parent, package, intent="resume")
        assert done.phase is RunPhase.COMPLETED
        assert [current_node(b) for b in h.llm.requests[calls_before:]][:1] == ["step-03-plan"]  # no child turn
        assert _state(h, parent)["artifacts"] == PLAN_FEATURE_ARTIFACTS


async def test_a_failing_child_fails_the_caller_and_retry_goes_on_with_the_same_child(project: Path) -> None:
    async with engine_harness(project, max_retries=0) as h:
        package, record = _start(h)
        competent = hello_subflow_responder()
        broken = [True]

        def respond(body: dict) -> ReplyLike:
            if broken[0] and current_node(body) == "party-01-voices":
                return ErrorReply(status=400, body="the model refused the request")
            return competent(body)

        h.llm.responder = respond
        failed = await _to_the_call(h, package, record)
        assert failed.phase is RunPhase.FAILED and failed.error is not None
        assert failed.error.message.startswith("Sub-workflow 'Party Mode' failed:")
        parent = h.runs.get(record.run_id)
        child = h.runs.get(parent.child_run_id or "")
        assert parent.phase is RunPhase.FAILED and child.phase is RunPhase.FAILED

        broken[0] = False
        asked = await h.engine.pump(parent, package, intent="resume")
        assert asked.widget == DIRECTION_WIDGET
        done = await h.engine.pump(parent, package, intent="continue", user_input=direction_answer())
        assert done.phase is RunPhase.COMPLETED
        assert h.runs.get(record.run_id).child_run_ids == [child.run_id]


async def test_the_model_cannot_skip_the_subworkflow_node(project: Path) -> None:
    async with engine_harness(project) as h:
        package, record = _start(h)
        competent = hello_subflow_responder()

        def respond(body: dict) -> ReplyLike:
            reply = competent(body)
            if current_node(body) == "step-01-brief" and isinstance(reply, Reply) and reply.tool_calls:
                skip = complete_node("sub-02-party-mode", to="step-03-plan")
                return Reply(content=reply.content, tool_calls=(*reply.tool_calls, skip))
            return reply

        h.llm.responder = respond
        asked = await _to_the_call(h, package, record)
        assert asked.widget == DIRECTION_WIDGET  # the child runs all the same
        assert _state(h, record)["currentNodeId"] == "sub-02-party-mode"
        done = await h.engine.pump(record, package, intent="continue", user_input=direction_answer())
        assert done.phase is RunPhase.COMPLETED
        refused = [json.loads(m["content"]) for m in History.load(h.store.conversation_log(record)).entries
                   if m.get("role") == "tool" and "E_SUBWORKFLOW_PENDING" in m["content"]]
        assert len(refused) == 1 and refused[0]["ok"] is False  # the model was told why, the state stayed


# ---- Slack ------------------------------------------------------------------------------------------


async def test_slack_thread_shows_the_nested_run_and_its_question(project: Path) -> None:
    async with bot_harness(project, ("hello-subflow",)) as bot:
        bot.llm.responder = hello_subflow_responder()
        top = await bot.start_waiting_run("PF")
        await bot.posted_text("Which feature should we plan")
        mark = bot.mark()
        await bot.reply(top, FEATURE_ANSWER)
        await bot.posted_text("Which direction should the plan take?", since=mark)
        nested = "Plan a Feature › Party Mode: Choose a direction · Sally (UX Designer) · 1/3 steps"
        status = await bot.wait_status(top, nested)  # on the subworkflow node's card of the run's plan
        assert "Round-table (party mode)" in message_text(status)
        assert len([m for m in bot.thread(top) if is_status(m)]) == 1  # one status message

        choice, widget = bot.button(top, "Simple repeat rules")
        mark = bot.mark()
        await bot.click(choice, widget)
        done = await bot.posted_text("completed.", since=mark)
        await bot.settle()
        for rel in PLAN_FEATURE_ARTIFACTS:
            assert rel in artifact_paths(done)
        final = await bot.wait_status(top, "Completed")
        assert "4/4" in message_text(final) and "Party Mode:" not in message_text(final)


async def test_a_crash_between_naming_the_child_and_creating_it_creates_that_child(project: Path) -> None:
    """The caller's record names the child first; a resume finds the name and creates the run under it."""
    async with engine_harness(project) as h:
        package, record = _start(h)
        state_dir = h.store.state_dir(record)

        def at_the_call(doc: run_state.StateDoc | None) -> run_state.Draft:
            assert doc is not None and doc.frontmatter is not None
            update = {"stepsCompleted": {"append": ["step-01-brief"]}, "currentNodeId": "sub-02-party-mode",
                      "variables": {"featureName": "recurring-tasks"}}
            return run_state.render_draft(run_state.apply_update(doc.frontmatter, update), doc.body)

        run_state.commit_state(state_dir, package.default_workflow.graph, at_the_call)
        named = "00000000-0000-4000-8000-000000000001"
        record.child_run_id, record.child_run_ids, record.phase = named, [named], RunPhase.RUNNING
        h.runs.update(record)  # as the killed process left it: the child named, not created
        assert [r.run_id for r in h.engine.interrupted_runs()] == [record.run_id]

        asked = await h.engine.pump(record, package, intent="resume")
        assert asked.widget == DIRECTION_WIDGET
        child = h.runs.get(named)
        assert (child.parent_run_id, child.workflow_id) == (record.run_id, "party-mode")
        assert _state(h, child)["variables"]["featureName"] == "recurring-tasks"
        assert h.runs.get(record.run_id).child_run_ids == [named]


async def test_in_a_git_project_the_child_works_in_its_callers_worktree(project: Path, tmp_path: Path) -> None:
    worktree_dir = tmp_path / "worktrees" / "run-1"
    worktree_dir.mkdir(parents=True)
    worktree = RunWorktree(path=str(worktree_dir), root=str(worktree_dir), branch="crewagent/plan-feature-1",
                           base_commit="0" * 40)
    async with engine_harness(project) as h:
        h.llm.responder = hello_subflow_responder()
        package = h.load("hello-subflow")
        record = h.runs.create(package, None, None, project, run_id="run-1", worktree=worktree)
        results = await drive(h.engine, record, package, [FEATURE_ANSWER, direction_answer()])
        assert results[-1].phase is RunPhase.COMPLETED
        [child_id] = h.runs.get(record.run_id).child_run_ids
        assert h.runs.get(child_id).worktree == worktree
    for rel in PLAN_FEATURE_ARTIFACTS:  # the child's files too: in the worktree, not the project folder
        assert (worktree_dir / rel).is_file() and not (project / rel).exists()


def test_both_slack_status_drawings_show_the_nested_run() -> None:
    """The plan (where Slack takes it) titles the subworkflow node's card; the drawn status has a line."""
    package = load_package(EXAMPLES / "hello-subflow")
    common = {"phase": RunPhase.WAITING_USER, "agent_id": "pm", "agent_name": "John (Product Manager)"}
    child = RunSnapshot(run_id="c", workflow_id="party-mode", workflow_name="Party Mode", steps_done=1,
                        steps_total=3, current_node_id="party-02-choose", current_node_title="Choose a direction",
                        **{**common, "agent_id": "ux", "agent_name": "Sally (UX Designer)"})
    parent = RunSnapshot(run_id="p", workflow_id="plan-feature", workflow_name="Plan a Feature", steps_done=1,
                         steps_total=4, current_node_id="sub-02-party-mode",
                         current_node_title="Round-table (party mode)", steps_completed=["step-01-brief"],
                         child=child, **common)
    drawn = blocks.status(parent, key="k").payload()
    assert ("Sub-workflow: *Plan a Feature* › *Party Mode* — Step: *Choose a direction* — Sally (UX Designer) "
            "· 1/3") in json.dumps(drawn, ensure_ascii=False)
    plan = plan_block(parent, package.default_workflow.graph, lambda a: a or "John", {})
    [card] = [t for t in plan["tasks"] if t["task_id"] == "sub-02-party-mode"]
    assert card["status"] == "in_progress"
    assert card["title"] == ("Round-table (party mode) · Plan a Feature › Party Mode: Choose a direction · "
                             "Sally (UX Designer) · 1/3 steps")


async def test_another_replica_goes_on_with_the_pair_from_postgres(
    database_url: str, tmp_path: Path, project: Path
) -> None:
    """Replica A stops at the child's question; replica B rebuilds both runs' folders and finishes."""
    pool = open_pool(database_url)
    stores = [PostgresRuntimeStore(pool, tmp_path / name) for name in ("replica-a", "replica-b")]
    try:
        async with ScriptedLLM(responder=hello_subflow_responder()) as llm:
            client = LLMClient(LLMSettings(model="scripted", base_url=llm.base_url, max_retries=0, timeout=10))
            try:
                engines = [Engine(store, RunManager(store), client) for store in stores]
                package = load_package(EXAMPLES / "hello-subflow", cache_dir=stores[0].packages_dir)
                record = engines[0].runs.create(package, None, None, project)
                asked = await drive(engines[0], record, package, [FEATURE_ANSWER])
                assert asked[-1].widget == DIRECTION_WIDGET
                assert stores[0].flush()

                elsewhere = stores[1].read_record(record.run_id)
                assert elsewhere is not None and elsewhere.child_run_id
                stores[1].materialise(elsewhere)
                child = stores[1].read_record(elsewhere.child_run_id)
                assert child is not None
                assert run_state.read_state(stores[1].state_dir(child))["currentNodeId"] == "party-02-choose"
                done = await engines[1].pump(elsewhere, package, intent="continue", user_input=direction_answer())
                assert done.phase is RunPhase.COMPLETED
                assert run_state.read_state(stores[1].state_dir(elsewhere))["stepsCompleted"] == PARENT_NODES
            finally:
                await client.aclose()
    finally:
        for store in stores:
            store.close()
        pool.close()
