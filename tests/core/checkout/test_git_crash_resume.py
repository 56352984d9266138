"""kill -9 of a real `crewagent run` on a git project: `--resume` finishes in the same worktree,
and `crewagent deliver` pushes the run's branch."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.files import RuntimeStore
from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.gitrepos import TeamRepo, git
from tests.support.processes import Spawner
from tests.support.scripts import CREATE_STORY_ARTIFACTS, EXAMPLES, STORY_KEY, create_story_responder
from tests.support.cli_driver import process_env, start_crewagent

pytestmark = pytest.mark.slow  # kill -9 mid-run in a git worktree, then resume and push


async def test_kill_9_then_resume_continues_in_the_same_worktree_and_deliver_pushes(
    tmp_path: Path, team_repo: TeamRepo, spawn: Spawner
) -> None:
    home = tmp_path / "home"
    async with ScriptedLLM(responder=create_story_responder(), latency=0.1) as llm:
        env = process_env(llm, home)
        proc = await start_crewagent(
            spawn, env, "run", str(EXAMPLES / "create-story-micro"), "--project", str(team_repo.clone),
            stdin=f"{STORY_KEY}\n".encode(),
        )
        await llm.wait_for_requests(4, timeout=60)
        os.kill(proc.pid, signal.SIGKILL)
        await asyncio.wait_for(proc.wait(), 30)

        (record,) = RunManager(RuntimeStore(home)).list()
        assert record.worktree is not None
        worktree = Path(record.worktree.path)
        assert (worktree / "artifacts/create-story/target.md").is_file(), "the first steps wrote in the worktree"

        proc = await start_crewagent(spawn, env, "run", "--resume", record.run_id, stdin=f"{STORY_KEY}\n".encode())
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        text = out.decode()
        assert "Run complete" in text
        assert f"crewagent deliver {record.run_id}" in text and record.worktree.branch in text

    resumed = RunManager(RuntimeStore(home)).get(record.run_id)
    assert resumed.worktree == record.worktree
    for rel in CREATE_STORY_ARTIFACTS:
        assert (worktree / rel).is_file(), rel
        assert not (team_repo.clone / rel).exists(), "the shared checkout stays untouched"

    proc = await start_crewagent(spawn, env, "deliver", record.run_id, "--author", "Grace Hopper <grace@example.invalid>")
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode() + out.decode()
    assert f"Pushed branch {record.worktree.branch}" in out.decode()
    assert team_repo.author(record.worktree.branch) == "Grace Hopper <grace@example.invalid>"
    assert set(CREATE_STORY_ARTIFACTS) <= set(team_repo.files(record.worktree.branch))
    assert RunManager(RuntimeStore(home)).get(record.run_id).delivery is not None
    assert git(team_repo.clone, "status", "--porcelain") == ""


async def test_deliver_refuses_a_plain_folder_run(
    tmp_path: Path, project: Path, git_config: Path, spawn: Spawner
) -> None:
    home = tmp_path / "home"
    async with ScriptedLLM(responder=create_story_responder()) as llm:
        env = process_env(llm, home)
        proc = await start_crewagent(
            spawn, env, "run", str(EXAMPLES / "create-story-micro"), "--project", str(project),
            stdin=f"{STORY_KEY}\n".encode(),
        )
        out, err = await asyncio.wait_for(proc.communicate(), 120)
        assert proc.returncode == 0, err.decode()
        assert "crewagent deliver" not in out.decode()
    (record,) = RunManager(RuntimeStore(home)).list()
    assert record.worktree is None and (project / CREATE_STORY_ARTIFACTS[0]).is_file()
    proc = await start_crewagent(spawn, env, "deliver", record.run_id)
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 2 and "plain folder" in err.decode()
