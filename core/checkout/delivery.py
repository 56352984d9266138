"""Delivery: a run's changes committed on its branch and pushed to the team's remote.

The push uses whatever credentials the host already has (git's credential helpers, the SSH
agent). A push the remote refuses leaves the commit in the worktree; the outcome says why in
words fit for the person who asked (the branch moved, access was denied, the remote is gone).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from ..store.runs_model import RunWorktree
from .git import GitError, git_ok, run_git
from .repo import GitRepo
from .urls import remote_repo

log = logging.getLogger(__name__)

Outcome = Literal["pushed", "committed", "nothing", "rejected", "auth", "failed"]

_MOVED = ("[rejected]", "non-fast-forward", "fetch first", "stale info")
_AUTH = (
    "authentication failed",
    "permission denied",
    "could not read username",
    "could not read password",
    "terminal prompts disabled",
    "access denied",
    "returned error: 403",
    "returned error: 401",
    "host key verification failed",
)


@dataclass(frozen=True)
class Author:
    name: str
    email: str

    def env(self) -> dict[str, str]:
        """The Slack user is the author and the committer: the bot only carries out their request."""
        return {
            "GIT_AUTHOR_NAME": self.name,
            "GIT_AUTHOR_EMAIL": self.email,
            "GIT_COMMITTER_NAME": self.name,
            "GIT_COMMITTER_EMAIL": self.email,
        }


@dataclass(frozen=True)
class Delivery:
    outcome: Outcome
    branch: str
    commit: str | None = None  # HEAD of the run's branch after committing
    pull_request_url: str | None = None
    message: str = ""  # for the user: what happened and what they can do

    @property
    def pushed(self) -> bool:
        return self.outcome == "pushed"


def commit_message(workflow_name: str, workflow_id: str, run_id: str, requested_by: str | None) -> str:
    lines = [f"{workflow_name}: results of run {run_id[:8]}", "", f"Workflow: {workflow_id}", f"Run: {run_id}"]
    if requested_by:
        lines.append(f"Requested-by: {requested_by}")
    return "\n".join(lines) + "\n"


async def deliver(repo: GitRepo, worktree: RunWorktree, message: str, author: Author | None) -> Delivery:
    """Commit what the run changed (if anything) and push the run's branch."""
    root, branch, timeout = worktree.root, worktree.branch, repo.settings.timeout
    env = author.env() if author else None
    await git_ok(["add", "-A"], cwd=root, timeout=timeout)
    staged = await run_git(["diff", "--cached", "--quiet"], cwd=root, timeout=timeout)
    if staged.returncode == 1:
        await _commit(root, message, env, timeout)
    head = (await git_ok(["rev-parse", "HEAD"], cwd=root, timeout=timeout)).strip()
    if head == worktree.base_commit:
        return Delivery("nothing", branch, head, message="The run changed no files, so there is nothing to commit.")
    if not repo.remote:
        return Delivery(
            "committed", branch, head,
            message=f"Committed on branch `{branch}`. The repository has no remote, so nothing was pushed.",
        )
    result = await run_git(["push", "--porcelain", repo.remote, f"HEAD:refs/heads/{branch}"], cwd=root, timeout=timeout)
    if result.ok:
        forge = remote_repo(repo.remote_url or "")
        link = forge.pull_request_url(branch, worktree.base_branch) if forge else None
        log.info("run branch pushed", extra={"branch": branch, "commit": head[:12]})
        return Delivery("pushed", branch, head, link, message=f"Pushed branch `{branch}` to the team repository.")
    return _refused(branch, head, result.stdout + "\n" + result.stderr)


async def _commit(root: str, message: str, env: dict[str, str] | None, timeout: float) -> None:
    try:
        await git_ok(["commit", "--quiet", "--no-verify", "-m", message], cwd=root, timeout=timeout, env=env)
    except GitError as exc:
        if "tell me who you are" in exc.detail.lower() or "empty ident" in exc.detail.lower():
            raise GitError(
                "GIT_NO_IDENTITY",
                "Git on this machine has no author name and email; pass --author \"Name <email>\" or set them "
                "with `git config user.name` / `git config user.email`.",
                detail=exc.detail,
                command=exc.command,
            ) from None
        raise


def _refused(branch: str, head: str, text: str) -> Delivery:
    lowered = text.lower()
    log.warning("push refused", extra={"branch": branch, "git": text.strip()[-500:]})
    if any(marker in lowered for marker in _MOVED):
        return Delivery(
            "rejected", branch, head,
            message=(
                f"The push was refused: branch `{branch}` moved on the team repository since this run last "
                "pushed (someone else pushed to it). Nothing was lost: the run's changes are committed on the "
                "branch here. Merge the remote changes into the branch, or push it under another name."
            ),
        )
    if any(marker in lowered for marker in _AUTH):
        return Delivery(
            "auth", branch, head,
            message=(
                "The push was refused: this server has no access to push to the team repository. "
                f"The changes are committed on branch `{branch}` here and nothing was lost; ask an admin to "
                "give the bot's host push access, then try again."
            ),
        )
    return Delivery(
        "failed", branch, head,
        message=(
            f"The push failed. The changes are committed on branch `{branch}` here and nothing was lost; "
            "try again in a moment, or ask an admin to check the server's log."
        ),
    )
