"""What a command sees of git: its own run's branch and the project's history, read-only; no remote, no
other run's work (not even by object id), no host path. Real git, a bare remote, the real bwrap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from crewagent.core.checkout.project import Author, Checkout, CheckoutSpec
from crewagent.core.run.pump import git_view
from crewagent.core.store.runs_model import RunRecord, RunWorktree
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from tests.support.gitrepos import TeamRepo, git
from tests.support.shell_sandbox import ShellBench, make_bench

RUN_A = "aaaaaaaa-1111-4111-8111-111111111111"
RUN_B = "bbbbbbbb-2222-4222-8222-222222222222"
OTHER_RUNS_SECRET = "the other run's unreleased work"


def record(run_id: str, project: Path, worktree: RunWorktree) -> RunRecord:
    return RunRecord(run_id=run_id, project_id="p", project_root=str(project), package_id="pkg", package_root="/x",
                     workflow_id="create-story", active_agent_id="sm", worktree=worktree)


@pytest.fixture
async def two_runs(team_repo: TeamRepo, tmp_path: Path) -> tuple[ShellBench, str]:
    """Run A's sandbox (with an edit of its own), and the commit run B delivered before."""
    co = Checkout(CheckoutSpec(project=team_repo.clone), Path(os.environ["CREWAGENT_HOME"]))
    a, b = await co.new_worktree(RUN_A, "create-story"), await co.new_worktree(RUN_B, "create-story")
    assert a is not None and b is not None
    (Path(b.worktree.path) / "artifacts" / "secret.md").write_text(OTHER_RUNS_SECRET + "\n")
    delivered = await co.deliver(record(RUN_B, team_repo.clone, b.worktree), workflow_name="x",
                                 author=Author("Bo", "bo@example.invalid"), requested_by=None)
    assert delivered.pushed and delivered.commit
    (Path(a.worktree.path) / "artifacts" / "PRD.md").write_text("# PRD, edited by run A\n")
    bench = make_bench(tmp_path / "bench")
    bench.project, bench.git = Path(a.worktree.path), git_view(record(RUN_A, team_repo.clone, a.worktree))
    if not (await sandbox_state(bench.config)).usable:
        pytest.skip("bubblewrap does not work on this machine")
    return bench, delivered.commit


async def test_status_diff_and_log_of_the_runs_own_branch_work_inside(two_runs: tuple[ShellBench, str]) -> None:
    bench, _ = two_runs
    result = await bench.run("git status --short && git diff && git log --oneline && git branch")
    assert result["ok"] is True and result["exitCode"] == 0, result
    out = result["stdout"]
    assert "M artifacts/PRD.md" in out and "+# PRD, edited by run A" in out and "sample project" in out
    assert "crewagent/create-story-aaaaaaaa" in out and "bbbbbbbb" not in out


async def test_no_remote_url_or_credential_is_visible(two_runs: tuple[ShellBench, str], team_repo: TeamRepo) -> None:
    bench, _ = two_runs
    result = await bench.run("cat @project/.git; git config --list; git remote -v; git ls-remote origin")
    assert result["exitCode"] != 0  # there is no `origin` to list
    shown = result["stdout"] + result["stderr"]
    assert "remote." not in result["stdout"] and team_repo.url not in shown and "remote.git" not in shown


async def test_another_runs_commit_is_unreachable_even_by_object_id(two_runs: tuple[ShellBench, str]) -> None:
    bench, other_commit = two_runs
    result = await bench.run(
        "git show crewagent/create-story-bbbbbbbb:artifacts/secret.md; "
        f"git cat-file -p {other_commit}; git rev-list --all | grep -c {other_commit}; "
        f"git cat-file --batch-all-objects --batch-check | grep -c {other_commit}; "
        f"git cat-file --batch-all-objects --batch | grep -c \"{OTHER_RUNS_SECRET}\"")
    shown = result["stdout"] + result["stderr"]
    assert OTHER_RUNS_SECRET not in result["stdout"].replace(f'grep -c "{OTHER_RUNS_SECRET}"', "")
    assert result["stdout"].split() == ["0", "0", "0"], shown


async def test_no_host_path_in_anything_under_the_git_view(two_runs: tuple[ShellBench, str], tmp_path: Path) -> None:
    bench, _ = two_runs
    # Counted inside: the tool's output is scrubbed of the paths it knows, so a leak would not show as such.
    result = await bench.run(f"find /@git /@git-objects @project/.git -type f -exec grep -lF '{tmp_path}' {{}} + "
                             "| wc -l; cat @project/.git /@git/objects/info/alternates; git rev-parse --git-dir")
    assert result["exitCode"] == 0, result
    lines = result["stdout"].split("\n")
    assert lines[0].strip() == "0", result
    assert str(tmp_path) not in result["stdout"]
    assert str(tmp_path) not in (bench.project / ".git").read_text(), "nor in the worktree on the host"


async def test_the_runs_repository_is_read_only_inside(two_runs: tuple[ShellBench, str]) -> None:
    bench, _ = two_runs
    assert bench.git is not None
    before = sorted(p.name for p in bench.git.git_dir.rglob("*"))
    result = await bench.run(
        "git -c user.name=t -c user.email=t@e commit -qam sneaky; echo x > /@git/hooks/post-commit; "
        "echo '[core] fsmonitor = /tmp/x' >> /@git/config; printf 'gitdir: /tmp/elsewhere' > @project/.git; "
        "echo x > /@git-objects/planted")
    assert result["exitCode"] != 0
    assert sorted(p.name for p in bench.git.git_dir.rglob("*")) == before
    assert "fsmonitor" not in (bench.git.git_dir / "config").read_text()
    assert (bench.project / ".git").read_text().startswith("gitdir: ")
    assert "sneaky" not in git(bench.git.git_dir, "log", "--oneline")
