"""A git repository a binding works on: where it is, its remote, its base branch.

`find_repo` looks at a project folder (a clone, or a folder inside one); `clone_repo` makes the
bot's own clone of a `repo:` URL under the runtime home. Finding the repository is the only time
git looks for a `.git` in a folder (the operator's project folder, never a run's worktree); from
then on every command names the repository found then (`GitRepo.place`). The remote's URL is kept
as found at start-up: deliveries push to it, whatever the repository's config says later.
Commands that change the shared repository (fetch, the runs' base refs, older runs' worktrees)
take the repository's lock, so two runs starting together never race on git's ref locks.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .git import GitError, GitResult, git_ok, run_git
from .git_env import GitPlace, empty_folders, host_settings_env
from .urls import for_log

log = logging.getLogger(__name__)

_LOCKS: dict[str, asyncio.Lock] = {}


@dataclass(frozen=True)
class GitSettings:
    timeout: float = 120.0  # any one git command (fetch, push and clone included)
    retention_hours: float = 72.0  # worktrees of completed runs are removed this long after the run's last change


@dataclass
class GitRepo:
    toplevel: Path  # the main working tree (or the bot's clone)
    common_dir: Path  # the shared .git directory: its objects are what every run's repository borrows
    git_dir: Path  # the main working tree's own git directory (the common one, unless it is a linked worktree)
    prefix: str  # the project folder inside the repository, "" for its root
    remote: str | None  # remote name runs fetch from and push to
    remote_url: str | None  # as configured; may carry credentials, so never shown or logged raw
    base_branch: str | None  # branch runs start from; None = the current commit
    settings: GitSettings = field(default_factory=GitSettings)
    owned: bool = False  # the bot's own clone of a `repo:`: kept up to date with the base branch

    @property
    def lock(self) -> asyncio.Lock:
        """One lock per repository and event loop, for commands that change shared refs."""
        key = f"{os.fspath(self.common_dir)}@{id(asyncio.get_running_loop())}"
        found = _LOCKS.get(key)
        if found is None:
            found = _LOCKS[key] = asyncio.Lock()
        return found

    @property
    def place(self) -> GitPlace:
        return GitPlace(self.git_dir, self.toplevel)

    async def git(self, *args: str) -> str:
        return await git_ok(args, place=self.place, timeout=self.settings.timeout)

    async def run(self, *args: str) -> GitResult:
        return await run_git(args, place=self.place, timeout=self.settings.timeout)


async def find_repo(project: Path, *, branch: str | None, settings: GitSettings) -> GitRepo | None:
    """The repository `project` belongs to, or None for a plain folder (or when git is missing)."""
    try:
        probe = await run_git(
            ["rev-parse", "--show-toplevel", "--git-common-dir", "--absolute-git-dir", "--show-prefix"], cwd=project,
            timeout=settings.timeout, trusted=await host_safe_directories(settings.timeout)
        )
    except GitError as exc:
        if exc.code == "GIT_NOT_INSTALLED":
            log.warning("git is not installed; the project is used as a plain folder")
            return None
        raise
    if not probe.ok:
        if "dubious ownership" in probe.stderr:
            log.warning(
                "git refuses the project folder because another user owns it; it is used as a plain folder. "
                "Add it to git's safe.directory (system or global config of the bot's user) to get a worktree per run."
            )
        return None
    lines = probe.stdout.splitlines()
    if len(lines) < 3:
        return None
    toplevel = Path(lines[0])
    common = Path(lines[1])
    if not common.is_absolute():
        common = (project / common).resolve()
    git_dir = Path(lines[2])
    prefix = lines[3].strip().rstrip("/") if len(lines) > 3 else ""
    if prefix and branch is None:
        # A folder inside someone's clone (the examples in this product's own checkout, say) is not
        # taken for the team repository unless the binding names the base branch to work from.
        log.info("the project folder is inside a git repository without a base `branch:`; used as a plain folder")
        return None
    repo = GitRepo(toplevel=toplevel, common_dir=common, git_dir=git_dir, prefix=prefix, remote=None,
                   remote_url=None, base_branch=branch, settings=settings)
    # git would not have answered the probe for a folder another user owns unless the operator said it is safe
    # (in the host's system or global config, which no other command reads): the bot's later commands trust it too.
    repo.remote = await _remote(repo)
    if repo.remote:
        repo.remote_url = (await repo.git("remote", "get-url", repo.remote)).strip() or None
    if repo.base_branch is None:
        repo.base_branch = await _default_branch(repo)
    return repo


async def host_safe_directories(timeout: float) -> tuple[str, ...]:
    """The `safe.directory` entries of the host's system and global git config (read as values; nothing runs)."""
    found = await run_git(["config", "--get-all", "safe.directory"], cwd=empty_folders().home,
                          timeout=timeout, env=host_settings_env())
    return tuple(line for line in found.stdout.splitlines() if line.strip()) if found.ok else ()


def clone_dir(home: Path, url: str) -> Path:
    """Where the bot keeps its clone of `url` (one per URL, under the runtime home)."""
    digest = hashlib.sha256(url.strip().encode("utf-8")).hexdigest()[:16]
    return home / "checkouts" / digest


async def clone_repo(url: str, dest: Path, *, branch: str | None, settings: GitSettings) -> None:
    """Clone `url` into `dest` unless it is already there; a half-finished clone never takes its place."""
    if (dest / ".git").exists():
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.parent / f".{dest.name}.cloning"
    shutil.rmtree(partial, ignore_errors=True)
    args = ["clone", "--quiet", "--single-branch", "--origin", "origin"]  # the base only: no other runs' pushed branches
    if branch:
        args += ["--branch", branch]
    result = await run_git([*args, "--", url, os.fspath(partial)], cwd=dest.parent, timeout=settings.timeout)
    if not result.ok:
        shutil.rmtree(partial, ignore_errors=True)
        log.warning("clone failed", extra={"url": for_log(url), "git": result.stderr.strip()[-500:]})
        raise GitError(
            "GIT_CLONE_FAILED",
            "The team repository could not be cloned. Check the binding's repo URL and that this server "
            "has access to it.",
            detail=result.stderr.strip(),
            command="git clone",
        )
    os.replace(partial, dest)


async def _remote(repo: GitRepo) -> str | None:
    """The base branch's upstream remote, else `origin`, else the only remote."""
    names = (await repo.git("remote")).split()
    if not names:
        return None
    if repo.base_branch:
        upstream = await repo.run("config", "--get", f"branch.{repo.base_branch}.remote")
        if upstream.ok and upstream.stdout.strip() in names:
            return upstream.stdout.strip()
    if "origin" in names:
        return "origin"
    return names[0] if len(names) == 1 else None


async def _default_branch(repo: GitRepo) -> str | None:
    """The remote's default branch when known, else the branch the clone has checked out."""
    if repo.remote:
        remote_head = f"refs/remotes/{repo.remote}/HEAD"
        head = await repo.run("symbolic-ref", "--quiet", "--short", remote_head)
        if head.ok and head.stdout.strip().startswith(f"{repo.remote}/"):
            return head.stdout.strip()[len(repo.remote) + 1 :]
    current = await repo.run("symbolic-ref", "--quiet", "--short", "HEAD")
    return current.stdout.strip() or None if current.ok else None
