"""Sub-workflows over the real `crewagent` CLI: nested progress, resume by either run id, kill -9."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from crewagent.core.base.frontmatter import parse
from crewagent.core.schemas import validator
from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.processes import Spawner
from tests.support.scripts import EXAMPLES, FEATURE_ANSWER, PLAN_FEATURE_ARTIFACTS, current_node, hello_subflow_responder
from tests.support.cli_driver import cli
from tests.support.cli_driver import process_env, start_crewagent

pytestmark = pytest.mark.slow  # kill -9 around sub-workflows, then resume

PACKAGE = EXAMPLES / "hello-subflow"
PARENT_NODES = ["step-01-brief", "sub-02-party-mode", "step-03-plan", "end-99"]
CHILD_NODES = ["party-01-voices", "party-02-choose", "party-99-wrap"]


def _states(home: Path) -> dict[str, dict]:
    """workflowRef → state frontmatter of every run in the store."""
    out: dict[str, dict] = {}
    for path in home.glob("projects/*/runs/*/state/workflow.md"):
        fm, _ = parse(path.read_text(encoding="utf-8"))
        assert not list(validator("workflow-frontmatter").iter_errors(fm)), path
        assert fm["workflowRef"] not in out, "a second run of the same workflow was created"
        out[fm["workflowRef"]] = fm
    return out


async def test_terminal_shows_the_nested_run_and_resumes_it_by_either_id(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    async with ScriptedLLM(responder=hello_subflow_responder()) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        # input ends at the child's question: the pair waits
        code, out, err = await cli(["run", str(PACKAGE), "--project", str(project)], FEATURE_ANSWER + "\n",
                                   monkeypatch, capsys)
        assert code == 3, err  # input ended while the run is not done
        assert "Starting run" in out and "Plan a Feature (4 steps)" in out
        assert "↳ Plan a Feature › Party Mode starts (sub-workflow run " in out
        assert "▶ Plan a Feature › Party Mode: Voices [party-01-voices] — Winston (Architect)" in out
        assert "? Which direction should the plan take?" in out
        parent_id = out.split("Starting run ", 1)[1].split(":", 1)[0]
        child_id = out.split("(sub-workflow run ", 1)[1].split(")", 1)[0]
        assert f"Continue it with: crewagent run --resume {parent_id}" in out

        code, out, err = await cli(["runs", "show", parent_id], "", monkeypatch, capsys)
        assert code == 0, err
        assert (f"Nested:    Plan a Feature › Party Mode: Choose a direction [party-02-choose] (1/3 steps, "
                f"run {child_id})") in out
        assert "Question:  Which direction should the plan take?" in out  # the child's question

        code, out, err = await cli(["runs", "show", child_id], "", monkeypatch, capsys)
        assert f"Called by: run {parent_id} (node sub-02-party-mode)" in out
        assert f"Continue:  crewagent run --resume {parent_id}" in out
        code, out, err = await cli(["runs", "list"], "", monkeypatch, capsys)
        [parent_row] = [line for line in out.splitlines() if line.startswith(parent_id)]
        [child_row] = [line for line in out.splitlines() if line.startswith(child_id)]
        assert "↳ party-mode" in child_row and " plan-feature " in parent_row and "↳" not in parent_row

        code, out, err = await cli(["run", "--resume", child_id], "1\n", monkeypatch, capsys)
        assert code == 0, err
        assert f"Run {child_id} is a sub-workflow of run {parent_id}; resuming that run." in out
        assert "↳ Plan a Feature › Party Mode continues" in out
        assert "↲ Plan a Feature › Party Mode done: direction=simple-rules" in out
        assert "▶ Plan [step-03-plan]" in out and "Run complete." in out
        for rel in PLAN_FEATURE_ARTIFACTS:
            assert f"  - {rel}" in out


@pytest.mark.parametrize("kill_after_calls", [3, 4, 5, 6])
async def test_kill_9_inside_or_around_the_child_then_resume_the_caller(
    tmp_path: Path, project: Path, kill_after_calls: int, spawn: Spawner
) -> None:
    """Calls: 1 brief question, 2 brief, 3 voices (child), 4 direction widget, 5 choose + wrap, 6 plan."""
    home = tmp_path / "home"
    async with ScriptedLLM(responder=hello_subflow_responder(), latency=0.1) as llm:
        env = process_env(llm, home)
        proc = await start_crewagent(spawn, env, "run", str(PACKAGE), "--project", str(project),
                                stdin=f"{FEATURE_ANSWER}\n1\n".encode())
        await llm.wait_for_requests(kill_after_calls, timeout=60)
        os.kill(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 30)
        assert proc.returncode == -signal.SIGKILL

        states = _states(home)  # valid, and at most one child
        for fm in states.values():
            for rel in fm.get("artifacts", []):
                assert (project / rel).is_file() and (project / rel).stat().st_size > 0
        assert not [p for p in project.rglob("*") if ".tmp." in p.name], "temp files left behind"
        done_before = [n for fm in states.values() for n in fm["stepsCompleted"]]
        parent_id = states["plan-feature"]["runId"]

        calls_before = len(llm.requests)
        proc = await start_crewagent(spawn, env, "run", "--resume", parent_id, stdin=b"1\n")
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode() + out.decode()
        assert "Run complete" in out.decode()
        resumed = [current_node(body) for body in llm.requests[calls_before:]]
        for node in done_before:
            assert node not in resumed, f"{node} was redone after the crash"

    states = _states(home)
    assert set(states) == {"plan-feature", "party-mode"}
    assert states["plan-feature"]["stepsCompleted"] == PARENT_NODES
    assert states["party-mode"]["stepsCompleted"] == CHILD_NODES
    assert states["plan-feature"]["variables"]["direction"] == "simple-rules"
    assert states["plan-feature"]["artifacts"] == PLAN_FEATURE_ARTIFACTS
