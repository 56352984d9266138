"""Run lookups and snapshots stay exact when they are made cheap: one index entry validated, state read once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crewagent.core.document import state as run_state
from crewagent.core.base.atomic import atomic_write_text
from crewagent.core.base.errors import CrewError
from crewagent.core.base.events import EngineEvent, RunPhase, StateUpdated
from crewagent.core.package.loader import load_package
from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.files import RuntimeStore
from tests.support.scripts import EXAMPLES, STORY_KEY, drive, engine_harness, hello_branch_responder, script_create_story


@pytest.fixture
def runs() -> RunManager:
    return RunManager(RuntimeStore())


def test_get_finds_one_run_among_broken_and_foreign_entries(runs: RunManager, project: Path) -> None:
    package = load_package(EXAMPLES / "hello-branch")
    kept = runs.create(package, None, None, project)
    path = runs.store.index_path
    data = json.loads(path.read_text())
    data["runs"].append({"run_id": "broken"})  # a bad entry elsewhere must not matter
    path.write_text(json.dumps(data))
    assert runs.get(kept.run_id).run_id == kept.run_id
    with pytest.raises(CrewError) as err:
        runs.get("broken")
    assert err.value.code == "RUN_NOT_FOUND"


def test_a_snapshot_from_a_kept_view_equals_a_fresh_one_until_the_state_changes(
    runs: RunManager, project: Path
) -> None:
    package = load_package(EXAMPLES / "hello-branch")
    record = runs.create(package, None, None, project)
    view = runs.state_view(record, package)
    record.phase = RunPhase.RUNNING  # record fields are always taken from the record itself
    assert runs.snapshot(record, package, view) == runs.snapshot(record, package)

    state_file = runs.store.state_dir(record) / run_state.STATE_FILE
    text = state_file.read_text()
    atomic_write_text(state_file, text.replace("stepsCompleted: []", "stepsCompleted: [step-01-intake]"))
    moved = runs.snapshot(record, package)
    assert moved.steps_done == 1
    assert runs.snapshot(record, package, runs.state_view(record, package)) == moved
    assert runs.snapshot(record, package, view).steps_done == 0  # a kept view is only as new as its read


def test_a_missing_state_file_shows_as_a_snapshot_error(runs: RunManager, project: Path) -> None:
    package = load_package(EXAMPLES / "hello-branch")
    record = runs.create(package, None, None, project)
    (runs.store.state_dir(record) / run_state.STATE_FILE).unlink()
    snap = runs.snapshot(record, package)
    assert snap.error is not None and snap.error.code == "STATE_FILE_NOT_FOUND"
    assert snap.steps_done == 0 and snap.current_node_id is None and snap.agent_id == record.active_agent_id


async def test_the_view_a_state_update_reports_equals_reading_the_state_file(project: Path) -> None:
    """A surface following a pump builds its view from each StateUpdated instead of reading workflow.md."""
    compared: list[StateUpdated] = []
    async with engine_harness(project) as h:
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")

        async def on_event(event: EngineEvent) -> None:
            if isinstance(event, StateUpdated):  # emitted right after the write it reports
                assert h.runs.updated_view(record, package, event) == h.runs.state_view(record, package)
                compared.append(event)

        results = await drive(h.engine, record, package, [STORY_KEY], on_event=on_event)
    assert results[-1].phase is RunPhase.COMPLETED
    assert len(compared) >= 6 and compared[-1].complete and not compared[0].complete


@pytest.mark.parametrize("branch", ["greenfield", "brownfield"])
async def test_a_finished_branching_run_counts_the_path_it_took(project: Path, branch: str) -> None:
    """hello-branch has five nodes; either path visits four. The total stays five from start to end, and the
    finished run says which part was not taken, everywhere (never "done (4/4)" after "(5 steps)")."""
    from crewagent.cli.render import EventPrinter, render_snapshot

    lines: list[str] = []
    async with engine_harness(project) as h:
        h.llm.responder = hello_branch_responder(preset_branch=branch)
        package = h.load("hello-branch")
        record = h.create(package)
        printer = EventPrinter(package, lines.append, steps_done=0)
        results = await drive(h.engine, record, package, on_event=printer)
        assert results[-1].phase is RunPhase.COMPLETED
        snapshot = h.runs.snapshot(record, package)
    assert (snapshot.steps_done, snapshot.steps_total, snapshot.steps_not_taken) == (4, 5, 1)
    step_lines = [line for line in lines if " done (" in line]
    assert [line.rsplit("(", 1)[1] for line in step_lines] == ["1/5)", "2/5)", "3/5)", "4 of 5, 1 not taken)"]
    assert "Progress:  4 of 5 steps, 1 not taken" in render_snapshot(snapshot)
