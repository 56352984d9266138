"""What a git project adds to a run: creating its worktree (fetch + branch + checkout) and delivering it.

A bare repository on the local disk is the remote (file://), so the figures are git's own cost on
this machine, without a network. Run by hand:

    python bench/git_worktrees.py [--runs 20] [--concurrent 8]

It reports the median and p95 of a new worktree (sequential starts), the wall time of
`--concurrent` starts at once (the repository lock serialises the fetch and the base ref; each run's
own repository is made outside it), and the time
to commit and push one run's artifacts.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crewagent.core.checkout.project import Author, Checkout, CheckoutSpec  # noqa: E402
from crewagent.core.store.runs_model import RunRecord  # noqa: E402


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _team_repo(base: Path) -> Path:
    remote, clone = base / "remote.git", base / "project"
    shutil.copytree(REPO / "examples" / "sample-project", clone)
    _git(base, "init", "--quiet", "--bare", "--initial-branch=main", str(remote))
    _git(clone, "init", "--quiet", "--initial-branch=main")
    _git(clone, "add", "-A")
    _git(clone, "commit", "--quiet", "-m", "sample project")
    _git(clone, "remote", "add", "origin", remote.as_uri())
    _git(clone, "push", "--quiet", "-u", "origin", "main")
    return clone


def _p95(values: list[float]) -> float:
    return sorted(values)[max(0, int(len(values) * 0.95) - 1)]


async def main(runs: int, concurrent: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        config = base / "gitconfig"
        config.write_text("[user]\n\tname = Bench\n\temail = bench@example.invalid\n[protocol \"file\"]\n\tallow = always\n")
        os.environ.update(GIT_CONFIG_GLOBAL=str(config), GIT_CONFIG_NOSYSTEM="1")
        clone = _team_repo(base)
        checkout = Checkout(CheckoutSpec(project=clone), base / "home")
        await checkout.open()

        sequential = []
        last = None
        for _ in range(runs):
            started = time.perf_counter()
            last = await checkout.new_worktree(str(uuid.uuid4()), "create-story")
            sequential.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        await asyncio.gather(*(checkout.new_worktree(str(uuid.uuid4()), "create-story") for _ in range(concurrent)))
        together = (time.perf_counter() - started) * 1000

        assert last is not None
        for n in range(6):
            (Path(last.worktree.path) / "artifacts" / f"bench-{n}.md").write_text(f"# artifact {n}\n" * 50)
        record = RunRecord(
            run_id=str(uuid.uuid4()), project_id="bench", project_root=str(clone), package_id="bench",
            package_root=str(clone), workflow_id="create-story", active_agent_id="sm", worktree=last.worktree,
        )
        started = time.perf_counter()
        result = await checkout.deliver(record, workflow_name="Create Story", author=Author("Bench", "b@x.invalid"),
                                        requested_by="Bench")
        delivery = (time.perf_counter() - started) * 1000
        assert result.pushed, result.message

    print(f"new worktree, sequential ({runs} runs): median {statistics.median(sequential):.0f} ms, "
          f"p95 {_p95(sequential):.0f} ms")
    print(f"{concurrent} worktrees started at once: {together:.0f} ms in all")
    print(f"commit + push of 6 artifacts: {delivery:.0f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.concurrent))
