"""One worktree per run, on its own branch in its own repository, so runs sharing a project never see each other's work.

A run's repository (its git directory, kept under the runtime home, outside the worktree) holds
only the run's branch and the run's own commits; it borrows the project's history from the shared
repository's object store (git alternates), so starting one costs no copy. Nothing of another
run is reachable from it, not even by object id, which is what the sandbox is shown. The shared
repository keeps a ref to each run's base commit so pruning it never takes objects a run borrows.

A run's worktree starts from the freshest base: the remote is fetched first (a failed fetch is a
warning, the run starts from what was fetched before). Worktrees of completed runs are removed
after the retention time; anything not yet committed is first committed to the run's branch, so
removing a worktree never loses work, and `ensure_worktree` brings it back from that branch.

Runs recorded before runs had their own repository (`RunWorktree.git_dir` is None) are linked
worktrees of the shared repository; they keep working, found through the shared repository's own
list of worktrees, never through the `.git` file in the worktree.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..base.atomic import atomic_write_text
from ..store.runs_model import RunWorktree
from .git import GitError, git_ok, run_git
from .git_env import GitPlace
from .nested import excluded, nested_repositories
from .repo import GitRepo
from ..tools.shell.sandbox_layout import GIT as SANDBOX_GIT_DIR

log = logging.getLogger(__name__)

BRANCH_PREFIX = "crewagent/"
# The worktree's own `.git` says what the sandbox shows there (its view of the run's repository), so no
# host path is written into the worktree; the bot never reads it.
DOT_GIT_TEXT = f"gitdir: {SANDBOX_GIT_DIR}\n"
BASE_REFS = "refs/crewagent/bases/"  # in the shared repository: keeps each run's borrowed history alive
KEEP_MESSAGE = "Work left uncommitted when the run's worktree was cleaned up"
BOT_IDENTITY = {
    "GIT_AUTHOR_NAME": "CrewAgent",
    "GIT_AUTHOR_EMAIL": "crewagent@localhost",
    "GIT_COMMITTER_NAME": "CrewAgent",
    "GIT_COMMITTER_EMAIL": "crewagent@localhost",
}
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class NewWorktree:
    worktree: RunWorktree
    warnings: tuple[str, ...] = ()  # in user terms: no paths, no URLs


def branch_name(workflow_id: str, run_id: str) -> str:
    """`crewagent/<workflow>-<first 8 of the run id>`, made safe for a ref name."""
    slug = _UNSAFE.sub("-", workflow_id).strip(".-") or "run"
    slug = re.sub(r"\.{2,}", ".", slug).removesuffix(".lock")[:60]
    return f"{BRANCH_PREFIX}{slug}-{run_id.replace('-', '')[:8]}"


def worktree_root(worktrees_dir: Path, run_id: str) -> Path:
    return worktrees_dir / run_id


async def create_worktree(repo: GitRepo, worktrees_dir: Path, git_dirs: Path, run_id: str,
                          workflow_id: str) -> NewWorktree:
    """A new repository, branch and worktree for the run, from the base as fresh as the remote allows."""
    branch = branch_name(workflow_id, run_id)
    root = worktree_root(worktrees_dir, run_id)
    git_dir = git_dirs / run_id
    warnings: list[str] = []
    async with repo.lock:
        if repo.remote:
            warning = await _fetch(repo)
            if warning:
                warnings.append(warning)
        base_commit = await _base_commit(repo)
        await repo.git("update-ref", f"{BASE_REFS}{run_id}", base_commit)
    borrowed = repo.common_dir / "objects"
    await asyncio.to_thread(_fresh_folders, root, git_dir)
    timeout = repo.settings.timeout
    await git_ok(["init", "--quiet", "--template=", f"--initial-branch={branch}",
                  f"--separate-git-dir={os.fspath(git_dir)}", os.fspath(root)], cwd=root.parent, timeout=timeout)
    await asyncio.to_thread(atomic_write_text, git_dir / "objects" / "info" / "alternates", f"{borrowed}\n")
    await asyncio.to_thread(atomic_write_text, root / ".git", DOT_GIT_TEXT)
    await git_ok(["reset", "--quiet", "--hard", base_commit], place=GitPlace(git_dir, root), timeout=timeout)
    project = root / repo.prefix if repo.prefix else root
    project.mkdir(parents=True, exist_ok=True)
    worktree = RunWorktree(
        path=os.fspath(project), root=os.fspath(root), branch=branch, base_branch=repo.base_branch,
        base_commit=base_commit, git_dir=os.fspath(git_dir), borrowed_objects=os.fspath(borrowed),
    )
    log.info("run worktree created", extra={"run_id": run_id, "branch": branch, "base": base_commit[:12]})
    return NewWorktree(worktree=worktree, warnings=tuple(warnings))


async def run_place(repo: GitRepo, worktree: RunWorktree) -> GitPlace:
    """The run's git directory and worktree, from the records (the shared repository's, for older runs)."""
    root = Path(worktree.root)
    if worktree.git_dir is not None:
        return GitPlace(Path(worktree.git_dir), root)
    linked = await asyncio.to_thread(_linked_git_dir, repo.common_dir, root)
    if linked is None:
        raise GitError("GIT_NO_WORKTREE", "This run's worktree is no longer known to the project's repository.",
                       command="git worktree")
    return GitPlace(linked, root)


async def ensure_worktree(repo: GitRepo, worktree: RunWorktree) -> None:
    """Bring back a run's worktree from its branch if it was removed (pruned, or the disk was cleaned)."""
    root = Path(worktree.root)
    if worktree.git_dir is None:
        await _ensure_linked(repo, worktree)
        return
    if root.is_dir():
        return
    git_dir = Path(worktree.git_dir)
    if not git_dir.is_dir():
        raise GitError("GIT_NO_WORKTREE", "This run's branch is gone from the server, so its files cannot be "
                       "restored.", command="git reset")
    async with repo.lock:  # one restore at a time: two resumes of the same run may ask together
        if root.is_dir():
            return
        partial = root.with_name(f".{root.name}.restoring")
        await asyncio.to_thread(shutil.rmtree, partial, True)
        partial.mkdir(parents=True)
        await asyncio.to_thread(atomic_write_text, partial / ".git", DOT_GIT_TEXT)
        await git_ok(["reset", "--quiet", "--hard"], place=GitPlace(git_dir, partial), timeout=repo.settings.timeout)
        os.replace(partial, root)
    Path(worktree.path).mkdir(parents=True, exist_ok=True)
    log.info("run worktree restored", extra={"branch": worktree.branch})


async def remove_worktree(repo: GitRepo, worktree: RunWorktree) -> None:
    """Commit anything left to the run's branch (locally), then remove the worktree; the branch stays.

    Repositories the run made inside its worktree are left out of that commit (their config never
    runs) and go with the worktree; everything else is saved.
    """
    root = Path(worktree.root)
    if root.is_dir():
        place = await run_place(repo, worktree)
        await save_leftovers(place, repo.settings.timeout)
    await asyncio.to_thread(shutil.rmtree, root, True)
    if worktree.git_dir is None:
        async with repo.lock:
            await repo.run("worktree", "prune")
    log.info("run worktree removed", extra={"branch": worktree.branch})


async def save_leftovers(place: GitPlace, timeout: float) -> None:
    assert place.work_tree is not None
    nested = await asyncio.to_thread(nested_repositories, place.work_tree)
    if nested:
        log.warning("cleanup leaves out repositories the run made inside its worktree", extra={"count": len(nested)})
    await git_ok(["add", "-A", "--", ".", *excluded(nested)], place=place, timeout=timeout)
    staged = await run_git(["diff", "--cached", "--quiet", "--ignore-submodules=all", "--no-ext-diff"], place=place,
                           timeout=timeout)
    if staged.returncode == 1:
        await git_ok(["commit", "--quiet", "--no-verify", "-m", KEEP_MESSAGE], place=place, timeout=timeout,
                     identity=BOT_IDENTITY)


def expired(updated_at_epoch: float, retention_hours: float, now: float | None = None) -> bool:
    return (now if now is not None else time.time()) - updated_at_epoch >= retention_hours * 3600


def _fresh_folders(root: Path, git_dir: Path) -> None:
    """Leftovers of an interrupted start of this same run go; the parents exist."""
    for folder in (root, git_dir):
        shutil.rmtree(folder, ignore_errors=True)
        folder.parent.mkdir(parents=True, exist_ok=True)


def _linked_git_dir(common_dir: Path, root: Path) -> Path | None:
    """A linked worktree's git directory, as the shared repository lists it (its own `gitdir` files)."""
    listed = common_dir / "worktrees"
    wanted = {os.fspath(root / ".git"), os.path.join(os.path.realpath(root), ".git")}  # never follows `.git` itself
    try:
        candidates = list(listed.iterdir())
    except OSError:
        return None
    for candidate in candidates:
        try:
            pointer = (candidate / "gitdir").read_text(encoding="utf-8").strip()
        except OSError:
            continue
        if pointer in wanted:
            return candidate
    return None


async def _ensure_linked(repo: GitRepo, worktree: RunWorktree) -> None:
    """A run from before runs had their own repository: its linked worktree, added again from its branch."""
    root = Path(worktree.root)
    if root.is_dir():  # unknown to the shared repository now? Its files stay; run_place says so instead
        return
    async with repo.lock:
        await repo.run("worktree", "prune")
        await asyncio.to_thread(shutil.rmtree, root, True)
        root.parent.mkdir(parents=True, exist_ok=True)
        await repo.git("worktree", "add", "--quiet", os.fspath(root), worktree.branch)
    Path(worktree.path).mkdir(parents=True, exist_ok=True)
    log.info("run worktree restored", extra={"branch": worktree.branch})


async def _fetch(repo: GitRepo) -> str | None:
    """Fetch the base branch; the warning to show when that fails (the run goes on from the last fetch)."""
    assert repo.remote is not None
    what = [repo.remote] + ([repo.base_branch] if repo.base_branch else [])
    try:
        result = await repo.run("fetch", "--quiet", "--no-recurse-submodules", *what)
    except GitError as exc:
        log.warning("fetch failed", extra={"reason": exc.code})
        return (
            "I couldn't update from the team repository (it took too long), so this run starts from the last "
            "fetched version."
        )
    if result.ok:
        if repo.owned and repo.base_branch:  # agent chats outside runs read the bot's clone: keep it current
            await repo.run("merge", "--ff-only", "--quiet", f"{repo.remote}/{repo.base_branch}")
        return None
    log.warning("fetch failed", extra={"git": result.stderr.strip()[-500:]})
    return "I couldn't update from the team repository, so this run starts from the last fetched version."


async def _base_commit(repo: GitRepo) -> str:
    candidates = []
    if repo.base_branch:
        if repo.remote:
            candidates.append(f"refs/remotes/{repo.remote}/{repo.base_branch}")
        candidates.append(f"refs/heads/{repo.base_branch}")
    candidates.append("HEAD")
    for ref in candidates:
        found = await repo.run("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        if found.ok and found.stdout.strip():
            return found.stdout.strip()
    raise GitError(
        "GIT_NO_BASE",
        "The project repository has no commit to start a run from. Commit something to it first.",
        command="git rev-parse",
    )
