"""The bot's git trusts nothing a run leaves in its worktree: real git, a local bare remote, the product's
own delivery and cleanup. Every hostile file is written straight to disk, the way a command would."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest

from crewagent.core.base.errors import CrewError
from crewagent.core.base.events import RunPhase
from crewagent.core.checkout.project import Author, Checkout, CheckoutSpec, GitSettings
from crewagent.core.store.runs_model import RunRecord, RunWorktree
from tests.support.gitrepos import TeamRepo, git, refusing_git_server

RUN_A = "aaaaaaaa-1111-4111-8111-111111111111"
AUTHOR = Author(name="Ada Lovelace", email="ada@example.invalid")
SECRET = "xoxb-not-for-git-0000"


@pytest.fixture(autouse=True)
def slack_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bot's own secret, in the bot's environment: no program git starts may ever see it."""
    monkeypatch.setenv("SLACK_BOT_TOKEN", SECRET)


def record(run_id: str, project: Path, worktree: RunWorktree, *, completed_long_ago: bool = False) -> RunRecord:
    made = RunRecord(
        run_id=run_id, project_id="p", project_root=str(project), package_id="pkg", package_root="/x",
        workflow_id="create-story", active_agent_id="sm", worktree=worktree,
    )
    if completed_long_ago:
        made.phase = RunPhase.COMPLETED
        made.updated_at = "2000-01-01T00:00:00Z"
    return made


async def new_run(team_repo: TeamRepo, home: Path) -> tuple[Checkout, RunWorktree]:
    co = Checkout(CheckoutSpec(project=team_repo.clone), home, GitSettings(retention_hours=1))
    new = await co.new_worktree(RUN_A, "create-story")
    assert new is not None
    return co, new.worktree


def tripwire(folder: Path, name: str, fired: Path) -> Path:
    """An executable that records that it ran, and with which environment, in `fired`."""
    script = folder / name
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(f"#!/bin/sh\necho {name} >> '{fired}'\nenv >> '{fired}'\ncat > /dev/null\nexit 0\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return script


def hostile_gitdir(place: Path, fired: Path, elsewhere: Path) -> Path:
    """A repository a command made: fsmonitor, hooks, a filter driver, an include, and its own remote."""
    place.parent.mkdir(parents=True, exist_ok=True)
    git(place.parent, "init", "--quiet", "--bare", str(place))
    hooks = place / "evil-hooks"
    for hook in ("pre-commit", "commit-msg", "post-commit", "pre-push", "post-checkout", "reference-transaction"):
        tripwire(hooks, hook, fired)
    included = place / "included.cfg"
    included.write_text(f"[core]\n\tfsmonitor = {tripwire(place, 'included-fsmonitor', fired)}\n")
    with (place / "config").open("a") as config:
        config.write(
            "[core]\n\tbare = false\n"
            f"\tfsmonitor = {tripwire(place, 'fsmonitor', fired)}\n\thooksPath = {hooks}\n"
            f"[filter \"evil\"]\n\tclean = {tripwire(place, 'clean-filter', fired)}\n\trequired = true\n"
            f"[includeIf \"gitdir:/\"]\n\tpath = {included}\n"
            f"[remote \"origin\"]\n\turl = {elsewhere.as_uri()}\n"
            f"[remote \"crewagent-delivery\"]\n\tpushurl = {elsewhere.as_uri()}\n"
        )
    return place


async def test_a_git_file_rewritten_by_a_command_points_delivery_nowhere(
    team_repo: TeamRepo, tmp_path: Path
) -> None:
    co, worktree = await new_run(team_repo, tmp_path / "home")
    root = Path(worktree.root)
    fired, elsewhere = tmp_path / "fired.log", tmp_path / "elsewhere.git"
    git(tmp_path, "init", "--quiet", "--bare", str(elsewhere))
    hostile = hostile_gitdir(root / "scratch" / "bare.git", fired, elsewhere)
    (root / ".git").unlink()
    (root / ".git").write_text(f"gitdir: {hostile}\n")  # what `fs_write @project/gitlink` did through a link
    (root / ".gitattributes").write_text("* filter=evil\n")
    (root / "artifacts" / "story.md").write_text("# Story\n")
    result = await co.deliver(record(RUN_A, team_repo.clone, worktree), workflow_name="x", author=AUTHOR,
                              requested_by=None)
    assert not fired.exists(), fired.read_text()[:2000]
    assert result.pushed and "team repository" in result.message
    assert team_repo.show(worktree.branch, "artifacts/story.md") == "# Story\n"  # the file's own bytes: no filter
    assert git(elsewhere, "for-each-ref") == "" and git(hostile, "for-each-ref") == ""


async def test_a_git_symlink_to_a_bare_repository_runs_no_hook_on_delivery(team_repo: TeamRepo, tmp_path: Path) -> None:
    co, worktree = await new_run(team_repo, tmp_path / "home")
    root = Path(worktree.root)
    fired, elsewhere = tmp_path / "fired.log", tmp_path / "elsewhere.git"
    git(tmp_path, "init", "--quiet", "--bare", str(elsewhere))
    hostile = hostile_gitdir(root / "tools" / "bare.git", fired, elsewhere)
    (root / ".git").unlink()
    (root / ".git").symlink_to(hostile)
    (root / "artifacts" / "story.md").write_text("# Story\n")
    result = await co.deliver(record(RUN_A, team_repo.clone, worktree), workflow_name="x", author=AUTHOR,
                              requested_by=None)
    assert not fired.exists(), fired.read_text()[:2000]
    assert result.pushed and worktree.branch in team_repo.branches()
    assert git(elsewhere, "for-each-ref") == ""


async def test_a_nested_repository_stops_delivery_and_never_runs(team_repo: TeamRepo, tmp_path: Path) -> None:
    co, worktree = await new_run(team_repo, tmp_path / "home")
    root = Path(worktree.root)
    fired = tmp_path / "fired.log"
    nested = root / "vendor" / "lib"
    nested.mkdir(parents=True)
    git(nested, "init", "--quiet")
    tripwire(nested, "hook.sh", fired)
    git(nested, "config", "core.fsmonitor", "./hook.sh")
    (nested / "lib.py").write_text("x = 1\n")
    git(nested, "add", "lib.py")
    git(nested, "commit", "--quiet", "--no-verify", "-m", "nested")
    fired.unlink(missing_ok=True)  # the test's own commands above may have set it off
    (root / "artifacts" / "story.md").write_text("# Story\n")
    run = record(RUN_A, team_repo.clone, worktree)
    refusals: list[CrewError] = []
    for _ in range(2):  # a second delivery used to enter the repository committed as a gitlink by the first
        try:
            await co.deliver(run, workflow_name="x", author=AUTHOR, requested_by=None)
        except CrewError as exc:
            refusals.append(exc)
    assert not fired.exists(), fired.read_text()[:2000]
    assert [e.code for e in refusals] == ["NESTED_REPOSITORY"] * 2
    message = refusals[0].message
    assert "@project/vendor/lib" in message and "`.git`" in message and str(tmp_path) not in message
    assert worktree.branch not in team_repo.branches()


async def test_cleanup_saves_the_work_around_a_nested_repository_without_entering_it(
    team_repo: TeamRepo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    co, worktree = await new_run(team_repo, tmp_path / "home")
    root = Path(worktree.root)
    fired = tmp_path / "fired.log"
    nested = root / "sub"
    nested.mkdir()
    git(nested, "init", "--quiet")
    tripwire(nested, "hook.sh", fired)
    git(nested, "config", "core.fsmonitor", "./hook.sh")
    git(nested, "config", "core.hooksPath", str(nested))
    (nested / "inner.txt").write_text("inner\n")
    git(nested, "add", "inner.txt")
    git(nested, "commit", "--quiet", "-m", "nested")
    (nested / "inner.txt").write_text("changed\n")
    fired.unlink(missing_ok=True)
    (root / "artifacts" / "left.md").write_text("unsaved\n")
    caplog.set_level(logging.WARNING)
    removed = await co.prune([record(RUN_A, team_repo.clone, worktree, completed_long_ago=True)])
    assert not fired.exists(), fired.read_text()[:2000]
    assert removed == 1
    assert not root.exists()
    saved = git(Path(worktree.git_dir or ""), "show", f"{worktree.branch}:artifacts/left.md")
    assert saved == "unsaved\n"
    tree = git(Path(worktree.git_dir or ""), "ls-tree", "-r", "--name-only", worktree.branch)
    assert "sub" not in tree.split() and "sub/inner.txt" not in tree
    assert "leaves out repositories" in caplog.text


async def test_hooks_and_drivers_in_the_projects_own_repository_do_not_run_on_a_runs_commit(
    team_repo: TeamRepo, tmp_path: Path
) -> None:
    """Even the shared repository's hooks stay off: a run's commit and push start no program."""
    fired = tmp_path / "fired.log"
    hooks = team_repo.clone / ".git" / "hooks"
    for hook in ("post-commit", "pre-push", "commit-msg", "post-checkout", "reference-transaction"):
        tripwire(hooks, hook, fired)
    co, worktree = await new_run(team_repo, tmp_path / "home")
    (Path(worktree.root) / "artifacts" / "story.md").write_text("# Story\n")
    result = await co.deliver(record(RUN_A, team_repo.clone, worktree), workflow_name="x", author=AUTHOR,
                              requested_by=None)
    assert result.pushed
    assert not fired.exists(), fired.read_text()[:2000]


async def test_a_push_gets_only_what_it_needs_from_the_bots_environment(
    team_repo: TeamRepo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A credential helper the operator configured sees the push's request, never the bot's secrets."""
    seen = tmp_path / "helper.log"
    helper = tmp_path / "helper.sh"
    helper.write_text(f"#!/bin/sh\nenv > '{seen}'\ncat > /dev/null\n")
    helper.chmod(0o755)
    monkeypatch.setenv("SSH_AUTH_SOCK", "/run/agent.sock")
    async with refusing_git_server() as port:
        git(team_repo.clone, "remote", "set-url", "origin", f"http://127.0.0.1:{port}/team/app.git")
        git(team_repo.clone, "config", "credential.helper", str(helper))
        co, worktree = await new_run(team_repo, tmp_path / "home")
        (Path(worktree.root) / "artifacts" / "story.md").write_text("# Story\n")
        result = await co.deliver(record(RUN_A, team_repo.clone, worktree), workflow_name="x", author=AUTHOR,
                                  requested_by=None)
    assert result.outcome == "auth"
    env = dict(line.split("=", 1) for line in seen.read_text().splitlines() if "=" in line)
    assert SECRET not in seen.read_text() and "SLACK_BOT_TOKEN" not in env and "CREWAGENT_HOME" not in env
    assert env["SSH_AUTH_SOCK"] == "/run/agent.sock" and env["GIT_TERMINAL_PROMPT"] == "0"
    assert env["HOME"] != os.environ.get("HOME") and os.listdir(env["HOME"]) == []


async def test_a_run_recorded_as_a_linked_worktree_still_delivers_is_pruned_and_comes_back(
    team_repo: TeamRepo, tmp_path: Path
) -> None:
    """Records from before runs had their own repository load and work as before."""
    home = tmp_path / "home"
    co = Checkout(CheckoutSpec(project=team_repo.clone), home, GitSettings(retention_hours=1))
    root = co.worktrees_dir / RUN_A
    root.parent.mkdir(parents=True)
    git(team_repo.clone, "worktree", "add", "--quiet", "-b", "crewagent/old-aaaaaaaa", str(root))
    base = git(team_repo.clone, "rev-parse", "HEAD").strip()
    old = RunWorktree.model_validate({"path": str(root), "root": str(root), "branch": "crewagent/old-aaaaaaaa",
                                      "base_branch": "main", "base_commit": base})
    assert old.git_dir is None
    await co.open()
    (root / "artifacts" / "story.md").write_text("# Story\n")
    result = await co.deliver(record(RUN_A, team_repo.clone, old), workflow_name="x", author=AUTHOR, requested_by=None)
    assert result.pushed and team_repo.show(old.branch, "artifacts/story.md") == "# Story\n"
    (root / "artifacts" / "left.md").write_text("unsaved\n")
    assert await co.prune([record(RUN_A, team_repo.clone, old, completed_long_ago=True)]) == 1
    assert not root.exists()
    await co.ensure(record(RUN_A, team_repo.clone, old))
    assert (root / "artifacts" / "left.md").read_text() == "unsaved\n"


async def test_a_repository_inside_an_ignored_folder_does_not_stop_delivery(team_repo: TeamRepo, tmp_path: Path) -> None:
    """A dependency cache that holds clones (`node_modules`, say) is ignored, so git never looks into it."""
    co, worktree = await new_run(team_repo, tmp_path / "home")
    root = Path(worktree.root)
    fired = tmp_path / "fired.log"
    (root / ".gitignore").write_text("deps/\n")
    nested = root / "deps" / "pkg"
    nested.mkdir(parents=True)
    git(nested, "init", "--quiet")
    tripwire(nested, "hook.sh", fired)
    git(nested, "config", "core.fsmonitor", "./hook.sh")
    (root / "artifacts" / "story.md").write_text("# Story\n")
    result = await co.deliver(record(RUN_A, team_repo.clone, worktree), workflow_name="x", author=AUTHOR,
                              requested_by=None)
    assert result.pushed and not fired.exists()
    assert not [f for f in team_repo.files(worktree.branch) if f.startswith("deps")]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: hands the worktree to another uid, as a command's files are")
async def test_delivery_and_cleanup_work_when_another_uid_owns_the_worktree(team_repo: TeamRepo, tmp_path: Path) -> None:
    """Commands may run as an unprivileged uid and own what they write: git must still take the files."""
    co, worktree = await new_run(team_repo, tmp_path / "home")
    root = Path(worktree.root)
    (root / "artifacts" / "story.md").write_text("# Story\n")
    for folder, _, files in os.walk(root):
        for name in [folder, *(os.path.join(folder, f) for f in files)]:
            os.lchown(name, 65534, 65534)
    result = await co.deliver(record(RUN_A, team_repo.clone, worktree), workflow_name="x", author=AUTHOR,
                              requested_by=None)
    assert result.pushed, result.message
    (root / "artifacts" / "left.md").write_text("unsaved\n")
    os.lchown(root / "artifacts" / "left.md", 65534, 65534)
    assert await co.prune([record(RUN_A, team_repo.clone, worktree, completed_long_ago=True)]) == 1
    assert git(Path(worktree.git_dir or ""), "show", f"{worktree.branch}:artifacts/left.md") == "unsaved\n"
