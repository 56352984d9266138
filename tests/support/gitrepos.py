"""Real git repositories for tests: a bare repository as the team's remote (file://), clones of it.

Git reads its identity and settings only from a private global config file (GIT_CONFIG_GLOBAL),
never the machine's, so the tests behave the same everywhere.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

DEFAULT_NAME = "CI Git"
DEFAULT_EMAIL = "ci@example.invalid"


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}
    )
    assert result.returncode == 0, f"git {' '.join(args)}: {result.stderr}"
    return result.stdout


@dataclass
class TeamRepo:
    remote: Path  # the bare repository
    clone: Path  # the team's checkout the bot is bound to

    @property
    def url(self) -> str:
        return self.remote.as_uri()

    def branches(self) -> list[str]:
        out = git(self.remote, "for-each-ref", "--format=%(refname:short)", "refs/heads")
        return sorted(out.split())

    def show(self, branch: str, path: str) -> str:
        return git(self.remote, "show", f"{branch}:{path}")

    def files(self, branch: str) -> list[str]:
        return git(self.remote, "ls-tree", "-r", "--name-only", branch).split()

    def author(self, branch: str) -> str:
        return git(self.remote, "log", "-1", "--format=%an <%ae>", branch).strip()

    def message(self, branch: str) -> str:
        return git(self.remote, "log", "-1", "--format=%B", branch)

    def push_from_elsewhere(self, tmp: Path, branch: str, path: str, text: str) -> None:
        """Someone else commits to `branch` on the remote."""
        other = tmp / f"other-{branch.replace('/', '-')}"
        git(tmp, "clone", "--quiet", "--branch", branch, self.url, str(other))
        (other / path).parent.mkdir(parents=True, exist_ok=True)
        (other / path).write_text(text, encoding="utf-8")
        git(other, "add", "-A")
        git(other, "commit", "--quiet", "-m", "someone else's change")
        git(other, "push", "--quiet", "origin", branch)


@pytest.fixture
def git_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private global git config: a default identity, `main` as the first branch, file:// allowed."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed (.ci/run installs it)")
    config = tmp_path / "gitconfig"
    config.write_text(
        f"[user]\n\tname = {DEFAULT_NAME}\n\temail = {DEFAULT_EMAIL}\n"
        "[init]\n\tdefaultBranch = main\n"
        "[protocol \"file\"]\n\tallow = always\n"
        "[advice]\n\tdetachedHead = false\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for name in ("GIT_DIR", "GIT_WORK_TREE", "GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME",
                 "GIT_COMMITTER_EMAIL", "GIT_SSH_COMMAND"):
        monkeypatch.delenv(name, raising=False)
    return config


@pytest.fixture
def team_repo(tmp_path: Path, project: Path, git_config: Path) -> TeamRepo:
    """The sample project committed to a bare remote on `main`; `project` becomes a clone of it."""
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    git(project, "init", "--quiet", "--initial-branch=main")
    git(project, "add", "-A")
    git(project, "commit", "--quiet", "-m", "sample project")
    git(project, "remote", "add", "origin", remote.as_uri())
    git(project, "push", "--quiet", "-u", "origin", "main")
    git(project, "remote", "set-head", "origin", "main")
    return TeamRepo(remote=remote, clone=project)


@asynccontextmanager
async def refusing_git_server() -> AsyncIterator[int]:
    """A loopback HTTP git remote that answers every request 401: the port, while the block runs."""

    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="git"'})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", refuse)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


GITHUB_ORIGIN = "git@github.com:team/app.git"
_SSH_TO_BARE = """#!/bin/sh
# git calls this as its ssh: the last argument is what it wants run on the server.
for wanted; do :; done
case "$wanted" in
  git-receive-pack*) exec git-receive-pack {bare} ;;
  git-upload-pack*) exec git-upload-pack {bare} ;;
esac
echo "fake ssh: unexpected command" >&2
exit 1
"""


def origin_on_github(team: TeamRepo, monkeypatch: pytest.MonkeyPatch, origin: str = GITHUB_ORIGIN) -> None:
    """The clone's origin is a GitHub SSH URL (so owner and repository come from it), and git's ssh is a
    script that serves every push and fetch from the local bare repository: the bot's git reaches it the
    way it reaches a real remote, through the one ssh setting it takes from the host."""
    git(team.clone, "remote", "set-url", "origin", origin)
    ssh = team.remote.parent / "ssh-to-bare"
    ssh.write_text(_SSH_TO_BARE.format(bare=shlex.quote(str(team.remote))))
    ssh.chmod(0o755)
    monkeypatch.setenv("GIT_SSH_COMMAND", shlex.quote(str(ssh)))
