"""Git checkouts with real git and a local bare repository as the team's remote (file://)."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from crewagent.core.checkout.project import Author, Checkout, CheckoutSpec, GitSettings
from crewagent.core.checkout.git import GitError, run_git
from crewagent.core.checkout.urls import remote_repo, scrub
from crewagent.core.checkout.worktrees import branch_name
from crewagent.core.base.errors import CrewError
from crewagent.core.tools.mounts import SandboxViolation, resolve
from crewagent.core.tools.base import Mounts
from crewagent.core.base.events import RunPhase
from crewagent.core.store.runs_model import RunRecord
from tests.support.gitrepos import TeamRepo, git, refusing_git_server

RUN_A = "aaaaaaaa-1111-4111-8111-111111111111"
RUN_B = "bbbbbbbb-2222-4222-8222-222222222222"
AUTHOR = Author(name="Ada Lovelace", email="ada@example.invalid")


def checkout(project: Path, home: Path, **spec: object) -> Checkout:
    return Checkout(CheckoutSpec(project=project, **spec), home)  # type: ignore[arg-type]


def record(run_id: str, project: Path, new: object) -> RunRecord:
    return RunRecord(
        run_id=run_id, project_id="p", project_root=str(project), package_id="pkg", package_root="/x",
        workflow_id="create-story", active_agent_id="sm", worktree=new.worktree,  # type: ignore[attr-defined]
    )


async def test_plain_folder_has_no_worktrees(project: Path, tmp_path: Path, git_config: Path) -> None:
    plain = checkout(project, tmp_path / "home")
    assert await plain.open() is None
    assert await plain.new_worktree(RUN_A, "create-story") is None
    with pytest.raises(CrewError) as err:
        await plain.deliver(record(RUN_A, project, type("N", (), {"worktree": None})()), workflow_name="x",
                            author=None, requested_by=None)
    assert err.value.code == "NOT_A_REPOSITORY"


async def test_two_runs_get_two_branches_and_never_see_each_others_files(team_repo: TeamRepo, tmp_path: Path) -> None:
    co = checkout(team_repo.clone, tmp_path / "home")
    a, b = await asyncio.gather(co.new_worktree(RUN_A, "create-story"), co.new_worktree(RUN_B, "create-story"))
    assert a and b and not a.warnings and not b.warnings
    assert a.worktree.branch == "crewagent/create-story-aaaaaaaa"
    assert b.worktree.branch == "crewagent/create-story-bbbbbbbb"
    pa, pb = Path(a.worktree.path), Path(b.worktree.path)
    assert pa != pb and team_repo.clone not in pa.parents
    (pa / "artifacts/story.md").write_text("from A", encoding="utf-8")
    (pb / "artifacts/story.md").write_text("from B", encoding="utf-8")
    assert (pa / "artifacts/story.md").read_text() == "from A"
    assert not (team_repo.clone / "artifacts/story.md").exists(), "the shared checkout is untouched"
    assert (pa / "artifacts/PRD.md").read_text() == (team_repo.clone / "artifacts/PRD.md").read_text()
    ga, gb = Path(a.worktree.git_dir or ""), Path(b.worktree.git_dir or "")
    assert git(ga, "branch", "--list").split() == ["*", "crewagent/create-story-aaaaaaaa"]
    assert git(gb, "branch", "--list").split() == ["*", "crewagent/create-story-bbbbbbbb"]
    assert "crewagent/" not in git(team_repo.clone, "branch", "--list"), "runs' branches live in their own repositories"


async def test_a_run_starts_from_the_freshest_base(team_repo: TeamRepo, tmp_path: Path) -> None:
    team_repo.push_from_elsewhere(tmp_path, "main", "artifacts/PRD.md", "the merged PRD\n")
    co = checkout(team_repo.clone, tmp_path / "home")
    new = await co.new_worktree(RUN_A, "create-story")
    assert new is not None and not new.warnings
    assert (Path(new.worktree.path) / "artifacts/PRD.md").read_text() == "the merged PRD\n"
    assert new.worktree.base_branch == "main"


async def test_fetch_failure_is_a_warning_and_the_run_starts_anyway(team_repo: TeamRepo, tmp_path: Path) -> None:
    git(team_repo.clone, "remote", "set-url", "origin", (tmp_path / "gone.git").as_uri())
    new = await checkout(team_repo.clone, tmp_path / "home").new_worktree(RUN_A, "create-story")
    assert new is not None
    assert new.warnings and "couldn't update" in new.warnings[0]
    assert str(tmp_path) not in new.warnings[0]
    assert (Path(new.worktree.path) / "artifacts/PRD.md").is_file()


async def test_commit_and_push_lands_the_artifacts_with_the_users_name(team_repo: TeamRepo, tmp_path: Path) -> None:
    co = checkout(team_repo.clone, tmp_path / "home")
    new = await co.new_worktree(RUN_A, "create-story")
    assert new is not None
    (Path(new.worktree.path) / "artifacts/stories").mkdir()
    (Path(new.worktree.path) / "artifacts/stories/1-2.md").write_text("# Story 1.2\n", encoding="utf-8")
    run = record(RUN_A, team_repo.clone, new)
    result = await co.deliver(run, workflow_name="Create Story", author=AUTHOR, requested_by="Ada Lovelace (U1)")
    assert result.outcome == "pushed", result.message
    branch = new.worktree.branch
    assert branch in team_repo.branches()
    assert team_repo.show(branch, "artifacts/stories/1-2.md") == "# Story 1.2\n"
    assert team_repo.author(branch) == "Ada Lovelace <ada@example.invalid>"
    message = team_repo.message(branch)
    assert "Create Story" in message and RUN_A in message and "Ada Lovelace (U1)" in message
    assert run.delivery is not None and run.delivery.commit == result.commit
    assert result.pull_request_url is None  # a file:// remote has no web page
    # Nothing new: pushing again is harmless and says so.
    again = await co.deliver(run, workflow_name="Create Story", author=AUTHOR, requested_by=None)
    assert again.outcome == "pushed" and again.commit == result.commit


async def test_a_run_that_changed_nothing_has_nothing_to_deliver(team_repo: TeamRepo, tmp_path: Path) -> None:
    co = checkout(team_repo.clone, tmp_path / "home")
    new = await co.new_worktree(RUN_A, "create-story")
    result = await co.deliver(record(RUN_A, team_repo.clone, new), workflow_name="x", author=AUTHOR, requested_by=None)
    assert result.outcome == "nothing"
    assert new is not None and new.worktree.branch not in team_repo.branches()


async def test_remote_branch_moved_says_so_and_keeps_everything(team_repo: TeamRepo, tmp_path: Path) -> None:
    co = checkout(team_repo.clone, tmp_path / "home")
    new = await co.new_worktree(RUN_A, "create-story")
    assert new is not None
    path = Path(new.worktree.path)
    (path / "artifacts/a.md").write_text("first\n", encoding="utf-8")
    run = record(RUN_A, team_repo.clone, new)
    assert (await co.deliver(run, workflow_name="x", author=AUTHOR, requested_by=None)).pushed
    team_repo.push_from_elsewhere(tmp_path, new.worktree.branch, "artifacts/b.md", "theirs\n")
    (path / "artifacts/a.md").write_text("second\n", encoding="utf-8")
    result = await co.deliver(run, workflow_name="x", author=AUTHOR, requested_by=None)
    assert result.outcome == "rejected"
    assert "moved" in result.message and "Nothing was lost" in result.message
    assert str(tmp_path) not in result.message
    assert (path / "artifacts/a.md").read_text() == "second\n"
    assert git(Path(new.worktree.git_dir or ""), "show", "HEAD:artifacts/a.md") == "second\n"  # committed locally
    assert team_repo.show(new.worktree.branch, "artifacts/a.md") == "first\n"


async def test_auth_failure_is_plain_and_credentials_never_reach_the_log(
    team_repo: TeamRepo, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with refusing_git_server() as port:
        secret_url = f"http://bot:hunter2secret@127.0.0.1:{port}/team/app.git"
        git(team_repo.clone, "remote", "set-url", "origin", secret_url)
        caplog.set_level(logging.DEBUG)
        co = checkout(team_repo.clone, tmp_path / "home")
        new = await co.new_worktree(RUN_A, "create-story")
        assert new is not None and new.warnings  # the fetch was refused too
        (Path(new.worktree.path) / "artifacts/a.md").write_text("x\n", encoding="utf-8")
        result = await co.deliver(record(RUN_A, team_repo.clone, new), workflow_name="x", author=AUTHOR,
                                  requested_by=None)
    assert result.outcome == "auth", result.message
    assert "access" in result.message and "nothing was lost" in result.message
    logged = "\n".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert "push refused" in logged
    assert "hunter2secret" not in logged and "hunter2secret" not in result.message + " ".join(new.warnings)


async def test_pruning_keeps_work_on_the_branch_and_a_resume_brings_the_worktree_back(
    team_repo: TeamRepo, tmp_path: Path
) -> None:
    co = Checkout(CheckoutSpec(project=team_repo.clone), tmp_path / "home", GitSettings(retention_hours=0))
    new, fresh = await asyncio.gather(co.new_worktree(RUN_A, "create-story"), co.new_worktree(RUN_B, "create-story"))
    assert new is not None and fresh is not None
    (Path(new.worktree.path) / "artifacts/left.md").write_text("unsaved\n", encoding="utf-8")
    done = record(RUN_A, team_repo.clone, new)
    done.phase = RunPhase.COMPLETED
    waiting = record(RUN_B, team_repo.clone, fresh)  # still waiting for its user: never pruned
    assert await co.prune([done, waiting]) == 1
    assert not Path(new.worktree.root).exists()
    assert Path(fresh.worktree.root).exists()
    await co.ensure(done)
    assert (Path(new.worktree.path) / "artifacts/left.md").read_text() == "unsaved\n"


async def test_a_worktree_a_later_step_continues_is_kept_while_that_step_is_in_use(
    team_repo: TeamRepo, tmp_path: Path
) -> None:
    """The next step of a cycle works in the previous run's worktree: the completed earlier run's
    retention must not remove it from under the later one."""
    co = Checkout(CheckoutSpec(project=team_repo.clone), tmp_path / "home", GitSettings(retention_hours=0))
    new = await co.new_worktree(RUN_A, "create-story")
    assert new is not None
    story = record(RUN_A, team_repo.clone, new)
    story.phase = RunPhase.COMPLETED
    dev = record(RUN_B, team_repo.clone, new)  # the next step, on the same worktree, waiting for its user
    assert await co.prune([story, dev]) == 0
    assert Path(new.worktree.root, ".git").exists()
    dev.phase = RunPhase.COMPLETED  # once every run in it is done and old, it goes (the branch stays)
    assert await co.prune([story, dev]) == 1
    assert not Path(new.worktree.root).exists()


async def test_a_repo_url_is_cloned_into_the_runtime_home(team_repo: TeamRepo, tmp_path: Path) -> None:
    home = tmp_path / "home"
    co = Checkout(CheckoutSpec(repo=team_repo.url, branch="main"), home)
    new = await co.new_worktree(RUN_A, "create-story")
    assert new is not None
    assert home in co.root.parents and (co.root / "artifacts/PRD.md").is_file()
    assert (Path(new.worktree.path) / "artifacts/PRD.md").is_file()
    team_repo.push_from_elsewhere(tmp_path, "main", "artifacts/PRD.md", "merged later\n")
    assert await co.new_worktree(RUN_B, "create-story") is not None
    assert (co.root / "artifacts/PRD.md").read_text() == "merged later\n", "the bot's own clone follows the base"
    bad = Checkout(CheckoutSpec(repo=(tmp_path / "missing.git").as_uri()), home)
    with pytest.raises(CrewError) as err:
        await bad.new_worktree(RUN_A, "x")
    assert err.value.code == "GIT_CLONE_FAILED" and str(tmp_path) not in err.value.message


async def test_a_project_folder_inside_a_repository_maps_to_the_same_folder_of_the_worktree(
    team_repo: TeamRepo, tmp_path: Path
) -> None:
    sub = team_repo.clone / "artifacts"
    new = await checkout(sub, tmp_path / "home", branch="main").new_worktree(RUN_A, "create-story")
    assert new is not None
    assert Path(new.worktree.path) == Path(new.worktree.root) / "artifacts"
    assert (Path(new.worktree.path) / "PRD.md").is_file()


async def test_a_folder_inside_a_repository_without_a_base_branch_is_a_plain_folder(
    team_repo: TeamRepo, tmp_path: Path
) -> None:
    """Running the examples from a clone of some repository must not branch that repository."""
    sub = team_repo.clone / "artifacts"
    assert await checkout(sub, tmp_path / "home").new_worktree(RUN_A, "create-story") is None
    assert "crewagent/" not in git(team_repo.clone, "branch", "--list")


async def test_git_timeout_kills_the_whole_process_group(tmp_path: Path, git_config: Path) -> None:
    pid_file = tmp_path / "pid"
    alias = f"!echo $$ > '{pid_file}'; exec sleep 30"
    with pytest.raises(GitError) as err:
        await run_git(["-c", f"alias.hang={alias}", "hang"], cwd=tmp_path, timeout=3.0)
    assert err.value.code == "GIT_TIMEOUT"
    written = pid_file.read_text().strip() if pid_file.exists() else ""
    if written:  # else the shell was killed before it could even write its pid (a very busy machine)
        assert await _ends(int(written), within=15.0), "git's child outlived the timeout"


async def _ends(pid: int, *, within: float) -> bool:
    """True once `pid` is gone or a zombie: a SIGKILLed process on a busy machine exits when it is next scheduled."""
    status = Path(f"/proc/{pid}/status")
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        try:
            if "zombie" in status.read_text():
                return True
        except FileNotFoundError:
            return True
        await asyncio.sleep(0.05)
    return False


async def test_git_never_prompts_for_credentials(tmp_path: Path, git_config: Path) -> None:
    result = await run_git(["ls-remote", "http://127.0.0.1:9/x.git"], cwd=tmp_path, timeout=30)
    assert not result.ok  # fails at once (nothing listens there); no prompt waited for input


def test_branch_names_are_valid_refs() -> None:
    assert branch_name("create-story", RUN_A) == "crewagent/create-story-aaaaaaaa"
    assert branch_name("weird id/..x y.lock", RUN_B) == "crewagent/weird-id-.x-y-bbbbbbbb"


@pytest.mark.parametrize(
    ("url", "link"),
    [
        ("https://github.com/acme/app.git", "https://github.com/acme/app/compare/main...crewagent%2Fx-1?expand=1"),
        ("git@github.com:acme/app.git", "https://github.com/acme/app/compare/main...crewagent%2Fx-1?expand=1"),
        ("https://x-access-token:ghs_SECRET@github.com/acme/app", "https://github.com/acme/app/compare/main...crewagent%2Fx-1?expand=1"),
        ("ssh://git@gitlab.example.com:2222/group/sub/app.git",
         "https://gitlab.example.com/group/sub/app/-/merge_requests/new?merge_request%5Bsource_branch%5D=crewagent%2Fx-1"
         "&merge_request%5Btarget_branch%5D=main"),
        ("https://oauth2:glpat-SECRET@gitlab.com/g/app.git",
         "https://gitlab.com/g/app/-/merge_requests/new?merge_request%5Bsource_branch%5D=crewagent%2Fx-1"
         "&merge_request%5Btarget_branch%5D=main"),
        ("git@bitbucket.org:team/app.git", "https://bitbucket.org/team/app/pull-requests/new?source=crewagent%2Fx-1&dest=main"),
    ],
)
def test_pull_request_links_come_from_the_remote_url_without_credentials(url: str, link: str) -> None:
    repo = remote_repo(url)
    assert repo is not None
    assert repo.pull_request_url("crewagent/x-1", "main") == link
    assert "SECRET" not in link


@pytest.mark.parametrize("url", ["file:///srv/git/app.git", "https://git.example.com/app.git", "/srv/app.git", ""])
def test_unknown_hosts_have_no_pull_request_link(url: str) -> None:
    assert remote_repo(url) is None


def test_scrub_removes_userinfo_from_urls() -> None:
    text = "fatal: unable to access 'https://bot:tok3n@github.com/a/b.git/': 403 and ssh://u:p@h/x"
    cleaned = scrub(text)
    assert "tok3n" not in cleaned and "u:p@" not in cleaned
    assert "https://***@github.com/a/b.git/" in cleaned


async def test_a_run_cannot_touch_gits_own_data_in_its_worktree(team_repo: TeamRepo, tmp_path: Path) -> None:
    new = await checkout(team_repo.clone, tmp_path / "home").new_worktree(RUN_A, "create-story")
    assert new is not None
    mounts = Mounts(project=Path(new.worktree.path), pkg=tmp_path)
    for alias, write in (("@project/.git", False), ("@project/.git", True), ("@project/sub/.git/config", True)):
        with pytest.raises(SandboxViolation) as err:
            resolve(mounts, alias, write=write)
        assert str(tmp_path) not in err.value.message
    assert resolve(mounts, "@project/.gitignore", write=True).rel == ".gitignore"
