"""RuntimeStore layout, the run index and RunManager.create's checks."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest

from crewagent.core.document import state as run_state
from crewagent.core.base.atomic import AppendLog
from crewagent.core.base.errors import CrewError
from crewagent.core.base.events import RunPhase
from crewagent.core.model.client import LLMClient, LLMSettings
from crewagent.core.package.loader import load_package
from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.files import RuntimeStore
from tests.support.scripts import EXAMPLES


@pytest.fixture
def runs() -> RunManager:
    return RunManager(RuntimeStore())


def test_create_lays_out_the_run(runs: RunManager, project: Path) -> None:
    package = load_package(EXAMPLES / "create-story-micro")
    shutil.rmtree(project / "artifacts")  # create() must make it again

    record = runs.create(package, None, "sm", project)

    home = Path(os.environ["CREWAGENT_HOME"]).resolve()
    expected_id = hashlib.sha256(os.path.realpath(project).encode()).hexdigest()[:16]
    assert record.project_id == expected_id
    run_dir = home / "projects" / expected_id / "runs" / record.run_id
    assert runs.store.run_dir(record) == run_dir
    state = run_state.read_state(run_dir / "state")
    assert state["currentNodeId"] == "step-01-select-story"
    assert state["runId"] == record.run_id and state["activeAgentId"] == "sm"
    assert state["workflowRef"] == "create-story-micro"
    assert state["stepsCompleted"] == [] and state["artifacts"] == []
    log = (run_dir / "state/logs/execution.jsonl").read_text().splitlines()
    assert [json.loads(line)["kind"] for line in log] == ["run.created"]
    assert (project / "artifacts").is_dir()
    assert not runs.store.conversation_log(record).is_relative_to(run_dir / "state")
    assert record.phase is RunPhase.WAITING_USER
    index = json.loads((home / "runs-index.json").read_text())
    assert [r["run_id"] for r in index["runs"]] == [record.run_id]


def test_create_rejects_bad_references(runs: RunManager, project: Path) -> None:
    multi = load_package(EXAMPLES / "multi-workflows")
    single = load_package(EXAMPLES / "hello-branch")
    cases = [
        (multi, "nope", "analyst", project, "WORKFLOW_REF_UNKNOWN"),
        (single, "other", "analyst", project, "WORKFLOW_REF_MISMATCH"),
        (single, None, "ghost", project, "AGENT_NOT_FOUND"),
        (single, None, "analyst", project / "missing", "PROJECT_ROOT_INVALID"),
    ]
    for package, workflow, agent, root, code in cases:
        with pytest.raises(CrewError) as err:
            runs.create(package, workflow, agent, root)
        assert err.value.code == code
        assert str(project) not in err.value.message
    assert runs.list() == []


def test_defaults_pick_the_workflow_and_the_agent_that_starts_it(runs: RunManager, project: Path) -> None:
    package = load_package(EXAMPLES / "hello-branch")
    record = runs.create(package, "workflow.md", None, project)
    assert (record.workflow_id, record.active_agent_id) == ("hello-branch", "analyst")


def test_a_multi_workflow_package_starts_its_entry_workflow_by_default(runs: RunManager, project: Path) -> None:
    package = load_package(EXAMPLES / "multi-workflows")  # entry: workflows/hello-linear/workflow.md
    assert runs.create(package, None, "analyst", project).workflow_id == "hello-linear"
    # the entry decides, not the order of workflows[]
    with TemporaryDirectory() as scratch:
        copy = Path(scratch) / "pkg"
        shutil.copytree(EXAMPLES / "multi-workflows", copy)
        manifest = json.loads((copy / "bmad.json").read_text())
        manifest["entry"].update(workflow="workflows/hello-branch/workflow.md",
                                 graph="workflows/hello-branch/workflow.graph.json")
        (copy / "bmad.json").write_text(json.dumps(manifest))
        assert runs.create(load_package(copy), None, "analyst", project).workflow_id == "hello-branch"


def test_store_refuses_a_home_inside_the_project(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREWAGENT_HOME", str(project / ".crewagent"))
    runs = RunManager(RuntimeStore())
    with pytest.raises(CrewError) as err:
        runs.create(load_package(EXAMPLES / "hello-branch"), None, None, project)
    assert err.value.code == "STORE_INSIDE_PROJECT"
    assert "CREWAGENT_HOME" in err.value.message


def test_index_lists_gets_and_snapshots(runs: RunManager, project: Path, tmp_path: Path) -> None:
    package = load_package(EXAMPLES / "multi-workflows")
    other = tmp_path / "other"
    other.mkdir()
    a = runs.create(package, "hello-linear", "analyst", project)
    b = runs.create(package, "hello-branch", "analyst", other)
    assert {r.run_id for r in runs.list()} == {a.run_id, b.run_id}
    assert [r.run_id for r in runs.list(project)] == [a.run_id]
    assert runs.latest(other).run_id == b.run_id  # type: ignore[union-attr]
    assert runs.latest(project, package_id="something-else") is None

    a.phase = RunPhase.RUNNING
    runs.update(a)
    fresh = RunManager(RuntimeStore())  # another process reading the same home
    assert fresh.get(a.run_id).phase is RunPhase.RUNNING
    with pytest.raises(CrewError) as err:
        fresh.get("no-such-run")
    assert err.value.code == "RUN_NOT_FOUND"

    snap = runs.snapshot(b, package)
    assert (snap.steps_done, snap.steps_total) == (0, 5)
    assert (snap.current_node_id, snap.current_node_title, snap.agent_id) == ("step-01-intake", "Intake", "analyst")
    assert snap.workflow_name == "Hello Branch" and snap.agent_name == "Mary (Business Analyst)"


def test_a_corrupt_index_line_does_not_hide_other_runs(runs: RunManager, project: Path) -> None:
    record = runs.create(load_package(EXAMPLES / "hello-branch"), None, None, project)
    path = runs.store.index_path
    data = json.loads(path.read_text())
    data["runs"].append({"run_id": "broken"})
    path.write_text(json.dumps(data))
    assert [r.run_id for r in runs.list()] == [record.run_id]
    path.write_text("{not json")
    with pytest.raises(CrewError) as err:
        runs.list()
    assert err.value.code == "RUNS_INDEX_READ_FAILED"


def test_llm_settings_need_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(CrewError) as err:
        LLMClient(LLMSettings.from_env())
    assert err.value.code == "LLM_MODEL_MISSING" and "CREWAGENT_MODEL" in err.value.message
    monkeypatch.setenv("CREWAGENT_MODEL", "m")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    settings = LLMSettings.from_env(timeout=5)
    assert (settings.model, settings.base_url, settings.api_key, settings.timeout) == (
        "m", "http://127.0.0.1:1/v1", None, 5
    )


async def test_the_request_carries_the_composed_messages_unchanged() -> None:
    """The client posts the engine's messages and tool specs as they are (no SDK reshaping)."""
    from tests.support.fakes.llm_server import ScriptedLLM

    messages = [
        {"role": "system", "content": "rules ✓"},
        {"role": "user", "content": "USER_INPUT\nhi"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "thinking",
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "fs_read", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
    ]
    function = {"name": "fs_read", "description": "d", "parameters": {"type": "object"}}
    tools = [{"type": "function", "function": function}]
    async with ScriptedLLM() as llm:
        llm.add_reply(content="done", tool_calls=[("fs_list", {"path": "@project"})])
        client = LLMClient(LLMSettings(model="m", base_url=llm.base_url, temperature=0.2))
        try:
            reply = await client.complete(messages, tools)
        finally:
            await client.aclose()
    assert llm.requests == [
        {
            "model": "m",
            "messages": messages,
            "tools": tools,
            "tool_choice": "auto",
            "temperature": 0.2,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ]
    assert reply.content == "done" and [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("fs_list", '{"path": "@project"}')
    ]


def test_a_held_log_writes_every_line_at_once_and_closes_on_release(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "execution.jsonl"  # the folder is made on the first line
    log = AppendLog(path)
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    before = fds()
    log.write(b"one\n")  # not held: opened and closed for the line
    assert fds() == before
    log.hold()
    log.write(b"two\n")
    assert path.read_bytes() == b"one\ntwo\n"  # in the file before write() returned, not buffered
    assert fds() == before + 1
    AppendLog(path).write(b"other writer\n")  # another writer's line lands after ours, not over it
    log.write(b"three\n")
    log.release()
    assert fds() == before
    assert path.read_bytes().splitlines() == [b"one", b"two", b"other writer", b"three"]


def test_a_change_by_another_process_is_seen_even_when_the_file_looks_the_same(project: Path) -> None:
    """ext4 hands a replaced file's inode to the next new file, and two quick writes can share an
    mtime: the index cache must not trust (inode, mtime, size) alone."""
    package = load_package(EXAMPLES / "hello-branch")
    ours, theirs = RunManager(RuntimeStore()), RunManager(RuntimeStore())  # two processes, one home
    record = ours.create(package, None, None, project)
    assert ours.get(record.run_id).active_agent_id == "analyst"  # cached with the file's signature
    index = ours.store.index_path
    before = os.stat(index)
    keep = index.with_name("kept-inode")
    os.link(index, keep)  # hold on to the inode this cache saw

    record.active_agent_id = "pmpmpmp"  # as long as "analyst": the index keeps its size
    theirs.store.save_record(record)
    changed = index.read_bytes()
    assert len(changed) == before.st_size
    with open(keep, "r+b") as handle:  # the other write, landing on the same inode with the same mtime
        handle.write(changed)
    os.utime(keep, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(keep, index)
    after = os.stat(index)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)

    assert ours.get(record.run_id).active_agent_id == "pmpmpmp"


def test_the_index_is_read_whole_whatever_its_layout(runs: RunManager, project: Path, tmp_path: Path) -> None:
    package = load_package(EXAMPLES / "hello-branch")
    other = tmp_path / "other"
    other.mkdir()
    a, b = runs.create(package, None, None, project), runs.create(package, None, None, other)
    runs.store.index.fold()
    path = runs.store.index_path
    lines = path.read_text().splitlines()
    assert len(lines) == 4  # the layout a compaction writes: one run per line
    path.write_text(lines[0] + "\n" + lines[1] + " " + lines[2] + "\n" + lines[3] + "\n")  # a hand edit, still JSON
    fresh = RunManager(RuntimeStore())
    assert {r.run_id for r in fresh.list()} == {a.run_id, b.run_id}
    fresh.update(fresh.get(a.run_id))
    fresh.store.index.fold()  # written again in the usual layout
    assert len(path.read_text().splitlines()) == 4 and {r.run_id for r in RunManager(RuntimeStore()).list()} == {
        a.run_id, b.run_id
    }
    path.write_text(path.read_text().replace('"run_id"', '"run_id" "', 1))  # one broken line
    with pytest.raises(CrewError) as err:
        RunManager(RuntimeStore()).list()
    assert err.value.code == "RUNS_INDEX_READ_FAILED"
