"""What a binding's project is: a plain folder, or a git repository whose runs get their own worktrees.

`Checkout` is what the surfaces use. It finds out lazily (the first run, or `open()` at start-up)
whether the project is a repository, cloning a `repo:` URL into the runtime home first; a
failure is retried on the next use. For a plain folder every method is a no-op and runs work in
the folder itself, as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable
from datetime import datetime
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

from ..base.errors import CrewError
from ..base.events import RunPhase
from ..store.runs_model import RunDelivery, RunRecord, utc_now
from ..store.files import project_id_for
from .delivery import Author, Delivery, commit_message, deliver
from .git import GitError
from .repo import GitRepo, GitSettings, clone_dir, clone_repo, find_repo
from .urls import for_log
from .worktrees import NewWorktree, create_worktree, ensure_worktree, expired, remove_worktree

log = logging.getLogger(__name__)
T = TypeVar("T")

__all__ = ["Author", "Checkout", "CheckoutSpec", "Delivery", "GitSettings", "NewWorktree"]


class CheckoutSpec(BaseModel):
    """A binding's project as configured: a folder (`project`) or a URL the bot clones (`repo`)."""

    project: Path | None = None
    repo: str | None = None
    branch: str | None = None
    auto_push: bool = False


class Checkout:
    def __init__(self, spec: CheckoutSpec, home: Path, settings: GitSettings | None = None) -> None:
        if (spec.project is None) == (spec.repo is None):
            raise ValueError("a checkout needs exactly one of project and repo")
        self.spec = spec
        self.home = home
        self.settings = settings or GitSettings()
        self._repo: GitRepo | None = None
        self._plain = False
        self._opening = asyncio.Lock()

    @property
    def root(self) -> Path:
        """The project folder (for a `repo:` binding, the bot's clone of it)."""
        if self.spec.project is not None:
            return self.spec.project
        return clone_dir(self.home, self.spec.repo or "")

    @property
    def worktrees_dir(self) -> Path:
        return self.home / "worktrees" / project_id_for(self.root)

    @property
    def git_dirs(self) -> Path:
        """Where each run's own repository lives: under the runtime home, never inside a worktree."""
        return self.home / "run-repositories" / project_id_for(self.root)

    @property
    def auto_push(self) -> bool:
        return self.spec.auto_push

    async def open(self) -> GitRepo | None:
        """The repository, or None for a plain folder. Raises GitError when a `repo:` cannot be cloned."""
        if self._repo is not None or self._plain:
            return self._repo
        async with self._opening:
            if self._repo is None and not self._plain:
                if self.spec.repo is not None:
                    await clone_repo(self.spec.repo, self.root, branch=self.spec.branch, settings=self.settings)
                found = await find_repo(self.root, branch=self.spec.branch, settings=self.settings)
                if found is None:
                    self._plain = True
                else:
                    found.owned = self.spec.repo is not None
                    if found.owned and found.remote:
                        found.remote_url = self.spec.repo  # the configured URL itself, whatever the clone says
                    self._repo = found
                    log.info(
                        "project is a git repository; runs get their own worktrees",
                        extra={"remote": for_log(found.remote_url or ""), "base": found.base_branch},
                    )
        return self._repo

    async def new_worktree(self, run_id: str, workflow_id: str) -> NewWorktree | None:
        """A worktree for a new run, or None when the project is a plain folder."""
        repo = await self._open_for_run()
        if repo is None:
            return None
        return await _guarded(create_worktree(repo, self.worktrees_dir, self.git_dirs, run_id, workflow_id), "start the run's branch")

    async def ensure(self, record: RunRecord) -> None:
        """The run's worktree exists again (after it was pruned); nothing to do for plain runs."""
        if record.worktree is None:
            return
        repo = await self._open_for_run()
        if repo is None:
            raise CrewError("WORKTREE_UNAVAILABLE", "This run's project is no longer a git repository.")
        await _guarded(ensure_worktree(repo, record.worktree), "restore the run's worktree")

    async def deliver(
        self, record: RunRecord, *, workflow_name: str, author: Author | None, requested_by: str | None
    ) -> Delivery:
        """Commit and push the run's branch; the record gets its `delivery` when the push went through."""
        if record.worktree is None:
            raise CrewError(
                "NOT_A_REPOSITORY",
                "This run's project is a plain folder, not a git repository, so there is no branch to push.",
            )
        await self.ensure(record)
        repo = await self._open_for_run()
        assert repo is not None
        message = commit_message(workflow_name, record.workflow_id, record.run_id, requested_by)
        result = await _guarded(deliver(repo, record.worktree, message, author), "commit and push")
        if result.pushed and result.commit:
            record.delivery = RunDelivery(
                commit=result.commit, pushed_at=utc_now(), pull_request_url=result.pull_request_url
            )
        return result

    async def prune(self, records: Iterable[RunRecord], *, keep: frozenset[str] = frozenset()) -> int:
        """Remove the worktrees of completed runs older than the retention time. Returns how many."""
        repo = self._repo
        if repo is None:
            return 0
        records = list(records)
        removed = 0
        for record in records:
            if (
                record.worktree is None
                or _shared_with_a_live_run(record, records, keep, self.settings.retention_hours)
                or record.parent_run_id is not None  # a sub-workflow's run works in its caller's worktree
                or Path(record.worktree.root).parent != self.worktrees_dir  # another project's run
                or record.run_id in keep
                or record.phase is not RunPhase.COMPLETED
                or not expired(_epoch(record.updated_at), self.settings.retention_hours)
                or not Path(record.worktree.root).is_dir()
            ):
                continue
            try:
                await remove_worktree(repo, record.worktree)
                removed += 1
            except GitError as exc:
                branch = record.worktree.branch
                log.warning("worktree cleanup failed", extra={"branch": branch, "git": exc.detail[-500:]})
        return removed

    async def _open_for_run(self) -> GitRepo | None:
        return await _guarded(self.open(), "open the project's repository")


async def _guarded(work: Awaitable[T], what: str) -> T:
    """A git failure becomes a CrewError fit for the user; git's own (scrubbed) words go to the log."""
    try:
        return await work
    except GitError as exc:
        log.warning(
            "git failed", extra={"doing": what, "code": exc.code, "command": exc.command, "git": exc.detail[-500:]}
        )
        if exc.code == "GIT_FAILED":
            raise CrewError(
                "GIT_FAILED",
                f"I couldn't {what}: git failed on the server. Try again; if it keeps failing, ask an admin to "
                "look at the bot's log.",
            ) from None
        raise CrewError(exc.code, exc.message) from None


def _shared_with_a_live_run(
    record: RunRecord, records: list[RunRecord], keep: frozenset[str], retention_hours: float
) -> bool:
    """A later step of a cycle works in the same worktree: it stays while any run in it is still in use."""
    assert record.worktree is not None
    return any(
        other.worktree is not None and other.worktree.root == record.worktree.root and other is not record
        and (other.run_id in keep or other.phase is not RunPhase.COMPLETED
             or not expired(_epoch(other.updated_at), retention_hours))
        for other in records
    )


def _epoch(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0
