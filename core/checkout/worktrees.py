"""One git worktree per run, on its own branch, so runs sharing a repository never see each other's files.

A run's worktree starts from the freshest base: the remote is fetched first (a failed fetch is a
warning, the run starts from what was fetched before). Worktrees of completed runs are removed
after the retention time; anything not yet committed is first committed to the run's branch, so
removing a worktree never loses work, and `ensure_worktree` brings it back from that branch.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from ..store.runs_model import RunWorktree
from .git import GitError, git_ok, run_git
from .repo import GitRepo

log = logging.getLogger(__name__)

BRANCH_PREFIX = "crewagent/"
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


async def create_worktree(repo: GitRepo, worktrees_dir: Path, run_id: str, workflow_id: str) -> NewWorktree:
    """A new branch and worktree for the run, from the base as fresh as the remote allows."""
    branch = branch_name(workflow_id, run_id)
    root = worktree_root(worktrees_dir, run_id)
    warnings: list[str] = []
    async with repo.lock:
        if repo.remote:
            warning = await _fetch(repo)
            if warning:
                warnings.append(warning)
        base_commit = await _base_commit(repo)
        root.parent.mkdir(parents=True, exist_ok=True)
        await repo.git("worktree", "add", "--quiet", "--no-track", "-b", branch, os.fspath(root), base_commit)
    project = root / repo.prefix if repo.prefix else root
    project.mkdir(parents=True, exist_ok=True)
    worktree = RunWorktree(
        path=os.fspath(project),
        root=os.fspath(root),
        branch=branch,
        base_branch=repo.base_branch,
        base_commit=base_commit,
    )
    log.info("run worktree created", extra={"run_id": run_id, "branch": branch, "base": base_commit[:12]})
    return NewWorktree(worktree=worktree, warnings=tuple(warnings))


async def ensure_worktree(repo: GitRepo, worktree: RunWorktree) -> None:
    """Bring back a run's worktree from its branch if it was removed (pruned, or the disk was cleaned)."""
    root = Path(worktree.root)
    if (root / ".git").exists():
        return
    async with repo.lock:
        await run_git(["worktree", "prune"], cwd=repo.toplevel, timeout=repo.settings.timeout)
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        await repo.git("worktree", "add", "--quiet", os.fspath(root), worktree.branch)
    Path(worktree.path).mkdir(parents=True, exist_ok=True)
    log.info("run worktree restored", extra={"branch": worktree.branch})


async def remove_worktree(repo: GitRepo, worktree: RunWorktree) -> None:
    """Commit anything left to the run's branch (locally), then remove the worktree; the branch stays."""
    root = Path(worktree.root)
    if (root / ".git").exists():
        await repo.git("add", "-A", cwd=root)
        staged = await run_git(["diff", "--cached", "--quiet"], cwd=root, timeout=repo.settings.timeout)
        if staged.returncode == 1:
            await git_ok(["commit", "--quiet", "--no-verify", "-m", KEEP_MESSAGE], cwd=root,
                         timeout=repo.settings.timeout, env=BOT_IDENTITY)
    async with repo.lock:
        result = await run_git(["worktree", "remove", "--force", os.fspath(root)], cwd=repo.toplevel,
                               timeout=repo.settings.timeout)
        if not result.ok:
            shutil.rmtree(root, ignore_errors=True)
            await run_git(["worktree", "prune"], cwd=repo.toplevel, timeout=repo.settings.timeout)
    log.info("run worktree removed", extra={"branch": worktree.branch})


def expired(updated_at_epoch: float, retention_hours: float, now: float | None = None) -> bool:
    return (now if now is not None else time.time()) - updated_at_epoch >= retention_hours * 3600


async def _fetch(repo: GitRepo) -> str | None:
    """Fetch the base branch; the warning to show when that fails (the run goes on from the last fetch)."""
    assert repo.remote is not None
    what = [repo.remote] + ([repo.base_branch] if repo.base_branch else [])
    try:
        result = await run_git(["fetch", "--quiet", *what], cwd=repo.toplevel, timeout=repo.settings.timeout)
    except GitError as exc:
        log.warning("fetch failed", extra={"reason": exc.code})
        return (
            "I couldn't update from the team repository (it took too long), so this run starts from the last "
            "fetched version."
        )
    if result.ok:
        if repo.owned and repo.base_branch:  # agent chats outside runs read the bot's clone: keep it current
            await run_git(["merge", "--ff-only", "--quiet", f"{repo.remote}/{repo.base_branch}"], cwd=repo.toplevel,
                          timeout=repo.settings.timeout)
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
        found = await run_git(["rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=repo.toplevel,
                              timeout=repo.settings.timeout)
        if found.ok and found.stdout.strip():
            return found.stdout.strip()
    raise GitError(
        "GIT_NO_BASE",
        "The project repository has no commit to start a run from. Commit something to it first.",
        command="git rev-parse",
    )
