"""kill -9 of a real `crewagent run` process at several points, then `--resume` finishes the run.

Checks the crash promise of the engine: the state file is never corrupt, no artifact is left
half-written, and the resumed run does not redo nodes that were completed before the kill.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from pathlib import Path

import pytest

from crewagent.core.base.frontmatter import parse
from crewagent.core.schemas import validator
from tests.support.cli_driver import process_env, start_crewagent
from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.pipelining import pipelining
from tests.support.processes import Spawner
from tests.support.scripts import (
    CREATE_STORY_ARTIFACTS as ARTIFACTS,
    EXAMPLES,
    STORY_KEY,
    create_story_responder,
    current_node,
)

pytestmark = pytest.mark.slow  # kill -9 of a run at every step, then resume

ORDER = [
    "step-01-select-story",
    "step-02-discover-inputs",
    "step-03-extract-context",
    "step-04-generate-story",
    "step-05-update-sprint-status",
    "end-99",
]


def _state_files(home: Path) -> list[Path]:
    return list(home.glob("projects/*/runs/*/state/workflow.md"))


@pytest.mark.parametrize("kill_after_calls", [1, 3, 5, 7])
async def test_kill_9_then_resume_finishes_without_redoing_nodes(
    tmp_path: Path, project: Path, kill_after_calls: int, spawn: Spawner
) -> None:
    home = tmp_path / "home"
    # Each model call takes a moment, so the kill lands while the engine waits on the model
    # or between tool rounds, never after the run is already over.
    async with ScriptedLLM(responder=create_story_responder(), latency=0.1) as llm:
        env = process_env(llm, home)
        proc = await start_crewagent(
            spawn, env, "run", str(EXAMPLES / "create-story-micro"), "--project", str(project),
            stdin=f"{STORY_KEY}\n".encode(),
        )
        await llm.wait_for_requests(kill_after_calls, timeout=60)
        os.kill(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 30)
        assert proc.returncode == -signal.SIGKILL

        # Whatever the moment, the state on disk parses and is valid, and every artifact
        # it lists exists in full (written by temp file + rename).
        (state_file,) = _state_files(home)
        fm, _ = parse(state_file.read_text(encoding="utf-8"))
        assert not list(validator("workflow-frontmatter").iter_errors(fm))
        for rel in fm.get("artifacts", []):
            assert (project / rel).is_file() and (project / rel).stat().st_size > 0
        assert not [p for p in project.rglob("*") if ".tmp." in p.name], "temp files left behind"
        done_before = list(fm["stepsCompleted"])
        run_id = state_file.parent.parent.name

        calls_before = len(llm.requests)
        proc = await start_crewagent(spawn, env, "run", "--resume", run_id, stdin=f"{STORY_KEY}\n".encode())
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        assert "Run complete" in out.decode()

        resumed_nodes = [current_node(body) for body in llm.requests[calls_before:]]
        for node in done_before:
            assert node not in resumed_nodes, f"{node} was redone after the crash"

    fm, _ = parse(state_file.read_text(encoding="utf-8"))
    assert fm["variables"]["workflowStatus"] == "complete"
    assert set(ORDER) <= set(fm["stepsCompleted"])
    assert set(ARTIFACTS) <= set(fm["artifacts"])
    for rel in ARTIFACTS:
        assert (project / rel).is_file()
    assert re.fullmatch(r"[0-9a-f-]{36}", run_id)


@pytest.mark.parametrize(("hang_at_call", "pipelined"), [(3, False), (6, False), (4, True), (6, True)])
async def test_resume_after_kill_9_sends_the_prompt_an_uninterrupted_run_would(
    tmp_path: Path, project: Path, hang_at_call: int, pipelined: bool, spawn: Spawner
) -> None:
    """The model call in flight when the process dies is asked again with the same messages.

    With the pipelining model, calls 4 and 6 start a node with the reads the previous reply made for
    it: those are kept in the resumed prompt too.
    """
    home = tmp_path / "home"
    script = pipelining(create_story_responder()) if pipelined else create_story_responder()
    hanging = asyncio.Event()
    release = asyncio.Event()

    async def respond(body: dict[str, object]) -> object:
        if len(llm.requests) == hang_at_call and not hanging.is_set():
            hanging.set()
            await release.wait()  # the process is killed while it waits for this answer
        return script(body)

    async with ScriptedLLM(responder=respond) as llm:
        env = process_env(llm, home)
        proc = await start_crewagent(
            spawn, env, "run", str(EXAMPLES / "create-story-micro"), "--project", str(project),
            stdin=f"{STORY_KEY}\n".encode(),
        )
        try:
            await asyncio.wait_for(hanging.wait(), 60)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            await asyncio.wait_for(proc.wait(), 30)
        interrupted = llm.requests[hang_at_call - 1]
        release.set()

        (state_file,) = _state_files(home)
        run_id = state_file.parent.parent.name
        proc = await start_crewagent(spawn, env, "run", "--resume", run_id)
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        resumed = llm.requests[hang_at_call]

    def normal(body: dict[str, object]) -> list[object]:  # the directive names the pump's intent
        return [re.sub(r"- intent: \w+", "- intent: *", str(m)) for m in body["messages"]]  # type: ignore[union-attr]

    assert normal(resumed) == normal(interrupted)
    assert resumed["tools"] == interrupted["tools"]
    if pipelined:
        assert sum(1 for m in resumed["messages"] if m["role"] == "tool") >= 2  # the carried reads
    assert "Run complete" in out.decode()
