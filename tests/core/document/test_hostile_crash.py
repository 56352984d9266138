"""A process killed between writing an artifact and recording it: the retry records it; temp files go away."""

from __future__ import annotations

from pathlib import Path

from crewagent.core.document.state import read_state
from tests.support.scripts import engine_harness, script_hello_linear
from tests.support.state_run import Run, run  # noqa: F401  (fixture)


async def test_a_retried_write_of_an_unrecorded_artifact_records_it(run: Run) -> None:  # noqa: F811
    # The first attempt wrote the file, then the process died before the state listed it.
    (run.project / "artifacts" / "report.md").write_text("# Report\n")
    assert read_state(run.state_dir)["artifacts"] == []

    outcome = await run.call("fs_write", {"path": "@project/artifacts/report.md", "content": "# Report\n"})
    assert outcome.result["ok"] is True and outcome.state_changed
    assert read_state(run.state_dir)["artifacts"] == ["artifacts/report.md"]

    before = run.state_file.read_bytes()
    again = await run.call("fs_write", {"path": "@project/artifacts/report.md", "content": "# Report v2\n"})
    assert again.result["ok"] is True and not again.state_changed
    assert run.state_file.read_bytes() == before  # recorded once; no needless state write


async def test_a_failed_recording_keeps_an_artifact_that_existed_before(run: Run) -> None:  # noqa: F811
    (run.project / "artifacts" / "old.md").write_text("kept\n")
    run.state_file.write_text("not a state file any more\n")  # recording cannot succeed
    outcome = await run.call("fs_write", {"path": "@project/artifacts/old.md", "content": "new\n"})
    assert outcome.result["ok"] is False
    assert "recording it in @state/workflow.md failed" in outcome.result["error"]["message"]
    assert (run.project / "artifacts" / "old.md").exists()


async def test_temp_files_of_a_killed_write_are_removed_when_the_run_starts_again(project: Path) -> None:
    async with engine_harness(project) as h:
        script_hello_linear(h.llm)
        package = h.load("multi-workflows")
        record = h.create(package, "hello-linear")
        state_dir = h.store.state_dir(record)
        stale = [state_dir / ".workflow.md.tmp.0123456789abcdef", state_dir / ".notes.md.tmp.fedcba9876543210"]
        for path in stale:
            path.write_bytes(b"")
        unrelated = state_dir / ".workflow.md.tmp.keep-me"
        unrelated.write_text("not ours")
        await h.engine.pump(record, package, intent="start", on_event=h.record_event)
        assert not any(path.exists() for path in stale)
        assert unrelated.exists()
        assert "state.temp_removed" in h.store.execution_log(record).read_text()
