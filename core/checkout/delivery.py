"""Delivery: a run's changes committed on its branch and pushed to the team's remote.

The commit takes the worktree's files and nothing else of it: git works on the run's repository
as the records name it, with no hook, fsmonitor or submodule recursion (see `git_env`), and a
repository the run made inside its worktree stops the delivery with a message saying what to do.
The push goes to the remote URL found when the project was opened, defined for that one command,
so no config a run could touch can send the branch elsewhere. It authenticates with what that URL
carries, the SSH agent and keys of the bot's user, or a credential helper in the project
repository's own config. A push the remote refuses leaves the commit in the worktree; the outcome
says why in words fit for the person who asked (the branch moved, access was denied, the remote is gone).
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from ..base.errors import CrewError
from ..store.runs_model import RunWorktree
from .git import GitError, git_ok, run_git
from .git_env import DELIVERY_REMOTE, GitPlace, empty_folders, host_settings_env
from .nested import nested_repositories
from .repo import GitRepo
from .urls import remote_repo
from .worktrees import run_place

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
    """Commit what the run changed (if anything) and push the run's branch to the project's remote."""
    branch, timeout = worktree.branch, repo.settings.timeout
    place = await run_place(repo, worktree)
    await _refuse_nested(place, worktree, timeout)
    await git_ok(["add", "-A"], place=place, timeout=timeout)
    staged = await run_git(["diff", "--cached", "--quiet", "--ignore-submodules=all", "--no-ext-diff"], place=place,
                           timeout=timeout)
    if staged.returncode == 1:
        identity = author.env() if author else await _host_identity(timeout)
        await _commit(place, message, identity, timeout)
    head = (await git_ok(["rev-parse", "HEAD"], place=place, timeout=timeout)).strip()
    if head == worktree.base_commit:
        return Delivery("nothing", branch, head, message="The run changed no files, so there is nothing to commit.")
    if not repo.remote or not repo.remote_url:
        return Delivery(
            "committed", branch, head,
            message=f"Committed on branch `{branch}`. The repository has no remote, so nothing was pushed.",
        )
    result = await run_git(
        ["push", "--porcelain", "--no-verify", "--no-recurse-submodules", DELIVERY_REMOTE, f"HEAD:refs/heads/{branch}"],
        place=place, timeout=timeout, config={f"remote.{DELIVERY_REMOTE}.url": repo.remote_url},
    )
    if result.ok:
        forge = remote_repo(repo.remote_url or "")
        link = forge.pull_request_url(branch, worktree.base_branch) if forge else None
        log.info("run branch pushed", extra={"branch": branch, "commit": head[:12]})
        return Delivery("pushed", branch, head, link, message=f"Pushed branch `{branch}` to the team repository.")
    return _refused(branch, head, result.stdout + "\n" + result.stderr)


async def _refuse_nested(place: GitPlace, worktree: RunWorktree, timeout: float) -> None:
    """A repository the run made inside its worktree stops the delivery (git would have to enter it),
    unless it lies in an ignored folder (a dependency cache), which `git add` never looks into."""
    nested = await asyncio.to_thread(nested_repositories, Path(worktree.root))
    if nested:
        ignored = await run_git(["check-ignore", "--stdin", "-z"], place=place, timeout=timeout,
                                stdin="\0".join(nested) + "\0")
        nested = [folder for folder in nested if folder not in set(ignored.stdout.split("\0"))]
    if not nested:
        return
    shown = ", ".join(f"`{_alias(worktree, folder)}`" for folder in nested[:5])
    more = f" and {len(nested) - 5} more" if len(nested) > 5 else ""
    raise CrewError(
        "NESTED_REPOSITORY",
        f"Nothing was committed: {shown}{more} is a git repository of its own inside the run's folder (it has a "
        "`.git`), and I never commit or enter another repository. Delete its `.git` to commit its files as "
        "ordinary files, or move it out of the project, then try again.",
    )


def _alias(worktree: RunWorktree, folder: str) -> str:
    """`@project/…` for a folder of the worktree, as the agent and the user know it."""
    inside = PurePosixPath(os.path.relpath(Path(worktree.root, folder), worktree.path)).as_posix()
    return f"@project/{inside}" if not inside.startswith("..") else folder


async def _host_identity(timeout: float) -> dict[str, str]:
    """The bot's user's own `user.name` / `user.email` (read as values) when nobody is named as author."""
    found: dict[str, str] = {}
    for key, names in (("user.name", ("GIT_AUTHOR_NAME", "GIT_COMMITTER_NAME")),
                       ("user.email", ("GIT_AUTHOR_EMAIL", "GIT_COMMITTER_EMAIL"))):
        value = await run_git(["config", "--get", key], cwd=empty_folders().home, timeout=timeout,
                              env=host_settings_env())
        if value.ok and value.stdout.strip():
            found.update({name: value.stdout.strip() for name in names})
    return found


async def _commit(place: GitPlace, message: str, identity: dict[str, str], timeout: float) -> None:
    try:
        await git_ok(["commit", "--quiet", "--no-verify", "-m", message], place=place, timeout=timeout,
                     identity=identity)
    except GitError as exc:
        if "tell me who you are" in exc.detail.lower() or "empty ident" in exc.detail.lower():
            raise GitError(
                "GIT_NO_IDENTITY",
                "Git on this machine has no author name and email; pass --author \"Name <email>\" or set them "
                "for the bot's user with `git config --global user.name` / `git config --global user.email`.",
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
