"""`crewagent deliver RUN_ID`: commit a completed run's changes on its branch and push the branch.

What the Commit & push button does in Slack. The author is `--author "Name <email>"`, else git's
own identity on this machine; the push uses this machine's git credentials.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys

from crewagent.core.api.checkout import Author
from crewagent.core.api.errors import CrewError
from crewagent.core.api.events import RunPhase
from crewagent.core.api.packages import load_package
from crewagent.core.api.runs import RunManager, RunRecord
from crewagent.core.api.stores import RuntimeStore

from .render import Write, stdout_write
from .run_cmd import resume_hint, run_checkout

EXIT_REFUSED = 1
EXIT_SETUP = 2
_AUTHOR = re.compile(r"^\s*(?P<name>[^<>]+?)\s*<(?P<email>[^<>\s]+)>\s*$")


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_main(args, stdout_write))
    except CrewError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_SETUP


def parse_author(text: str | None) -> Author | None:
    if not text:
        return None
    match = _AUTHOR.match(text)
    if match is None:
        raise CrewError("USAGE", 'give the author as --author "Name <email>".')
    return Author(name=match.group("name"), email=match.group("email"))


async def _main(args: argparse.Namespace, write: Write) -> int:
    author = parse_author(args.author)
    store = RuntimeStore()
    try:
        return await _deliver(args, author, RunManager(store), write)
    finally:
        store.close()  # the run index folded: an earlier release reads only runs-index.json


async def _deliver(args: argparse.Namespace, author: Author | None, runs: RunManager, write: Write) -> int:
    store = runs.store
    record = runs.get(args.run_id)
    if record.worktree is None:
        raise CrewError(
            "NOT_A_REPOSITORY",
            "This run's project is a plain folder, not a git repository: its results are already in the project.",
        )
    if record.phase is not RunPhase.COMPLETED:
        write(f"Run {record.run_id} is not complete yet; finish it first: {resume_hint(record.run_id)}")
        return EXIT_REFUSED
    result = await run_checkout(record, store).deliver(
        record, workflow_name=_workflow_name(record, store), author=author, requested_by=author.name if author else None
    )
    if result.pushed:
        runs.update(record)
    write(result.message.replace("`", ""))
    if result.pull_request_url:
        write(f"Open a pull request: {result.pull_request_url}")
    return 0 if result.outcome in ("pushed", "nothing", "committed") else EXIT_REFUSED


def _workflow_name(record: RunRecord, store: RuntimeStore) -> str:
    try:
        package = load_package(record.package_root, cache_dir=store.packages_dir)
    except (CrewError, OSError):  # the package may have moved since; its id names the workflow well enough
        return record.workflow_id
    workflow = package.workflow(record.workflow_id)
    return workflow.display_name if workflow else record.workflow_id
