"""`crewagent runs list [--project DIR]` and `crewagent runs show RUN_ID`: inspect saved runs, those under
CREWAGENT_HOME, or with `--database-url` (or CREWAGENT_DATABASE_URL) those the replicas share in Postgres.
`crewagent runs fold`: fold the home's run index journal into runs-index.json (core.store.run_index)."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from crewagent.core.api.errors import CrewError
from crewagent.core.api.events import RunPhase
from crewagent.core.api.runs import History, ModelSpan, RunManager, RunRecord, RunSnapshot
from crewagent.core.api.packages import load_package, Package
from crewagent.core.api.stores import PostgresRuntimeStore, RuntimeStore

from crewagent.bot.outbox.given_up import given_up_for_run

from .exit_codes import EXIT_FAILED, EXIT_USAGE
from .render import Write, render_snapshot, stdout_write


def run(args: argparse.Namespace, write: Write = stdout_write) -> int:
    if args.runs_action == "fold":
        return _fold(write)
    url = getattr(args, "database_url", None) or os.environ.get("CREWAGENT_DATABASE_URL")
    if url:
        return _in_database(args, url, write)
    return _inspect(args, RunManager(RuntimeStore()), write)


def _inspect(args: argparse.Namespace, runs: RunManager, write: Write) -> int:
    try:
        if args.runs_action == "list":
            return _list(runs, args.project, write)
        if args.runs_action == "show":
            return _show(runs, args.run_id, write)
    except CrewError as exc:  # a run id that matches no run, or more than one
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    print(f"error: unknown runs action {args.runs_action!r}", file=sys.stderr)
    return EXIT_USAGE


def _fold(write: Write) -> int:
    """The run index under CREWAGENT_HOME made whole in runs-index.json (replicas keep theirs in Postgres)."""
    store = RuntimeStore()
    try:
        folded = store.index.fold()
    except CrewError as exc:  # an index that cannot be read or written
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_FAILED
    if folded:
        write(f"Folded {folded} journal entries into {store.index_path}.")
    else:
        write(f"Nothing to fold: {store.index_path} already holds every run.")
    return 0


def _in_database(args: argparse.Namespace, url: str, write: Write) -> int:
    """The runs the replicas share. Their files are copied into a scratch folder to be read, never into
    this machine's CREWAGENT_HOME, where a replica may be working on the same run."""
    from crewagent.bot.replicas.tables import REPLICA_SCHEMA

    with tempfile.TemporaryDirectory(prefix="crewagent-runs-") as scratch:
        try:
            store = PostgresRuntimeStore.open(url, Path(scratch), schema=REPLICA_SCHEMA)
        except CrewError as exc:  # a URL that is no Postgres URL, or a database that does not answer
            print(f"error: {exc.message}", file=sys.stderr)
            return EXIT_USAGE if exc.code == "DATABASE_URL_INVALID" else EXIT_FAILED
        try:
            return _inspect(args, RunManager(store), write)
        finally:
            store.close()
            store.pool.close()


class _Packages:
    """Loads each run's package once; a package that moved or broke just hides the details."""

    def __init__(self, store: RuntimeStore) -> None:
        self.store = store
        self._cache: dict[str, Package | None] = {}

    def get(self, record: RunRecord) -> Package | None:
        if record.package_root not in self._cache:
            try:
                self._cache[record.package_root] = (
                    load_package(record.package_root, cache_dir=self.store.packages_dir)
                    if Path(record.package_root).is_dir()
                    else None
                )
            except CrewError:
                self._cache[record.package_root] = None
        return self._cache[record.package_root]


def _snapshot(runs: RunManager, packages: _Packages, record: RunRecord) -> RunSnapshot | None:
    if isinstance(runs.store, PostgresRuntimeStore):
        runs.store.materialise(record)  # into the scratch folder (see _in_database)
    package = packages.get(record)
    return runs.snapshot(record, package) if package is not None else None


def _list(runs: RunManager, project: str | None, write: Write) -> int:
    records = runs.list(Path(project) if project else None)
    if not records:
        write("No runs yet. Start one with: crewagent run PACKAGE --project DIR")
        return 0
    packages = _Packages(runs.store)
    rows = [
        ("RUN ID", "PROJECT", "WORKFLOW", "PHASE", "CURRENT NODE", "STEPS", "ARTIFACTS", "CALLS", "TOKENS", "UPDATED")
    ]
    for record in records:
        snap = _snapshot(runs, packages, record)
        phase = record.phase.value + (" (paused)" if record.paused else "")
        rows.append(
            (
                record.run_id,
                Path(record.project_root).name,
                f"↳ {record.workflow_id}" if record.parent_run_id else record.workflow_id,  # a sub-workflow's run
                phase,
                (snap.current_node_id or "-") if snap else "?",
                snap.progress(unit="") if snap else "?",
                str(len(snap.artifacts)) if snap else "?",
                str(record.usage.llm_calls),
                f"{record.usage.total_tokens:,}",
                record.updated_at[:19].replace("T", " "),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        write("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def _show(runs: RunManager, run_id: str, write: Write) -> int:
    record = runs.get(run_id)
    snap = _snapshot(runs, _Packages(runs.store), record)
    if snap is None:
        write(f"Run:       {record.run_id}")
        write(f"Workflow:  {record.workflow_id} (package '{record.package_id}' is no longer loadable)")
        write(f"Phase:     {record.phase.value}")
    else:
        for line in render_snapshot(snap):
            write(line)
    write(f"Package:   {record.package_id}")
    write(f"Project:   {record.project_root}")
    if record.worktree is not None:
        write(f"Worktree:  {record.worktree.root}")
        pushed = " (pushed)" if record.delivery else f" (not pushed: crewagent deliver {record.run_id})"
        write(f"Branch:    {record.worktree.branch}{pushed}")
    write(f"Created:   {record.created_at}")
    write(f"Updated:   {record.updated_at}")
    if snap is None or not record.usage.llm_calls:
        write(f"Usage:     {record.usage.line()}")
    if record.models:
        write("Models:    " + ", ".join(_model_span(span) for span in record.models))
    if record.token_budget:
        write(f"Budget:    {record.token_budget:,} tokens")
    if record.parent_run_id:
        write(f"Called by: run {record.parent_run_id} (node {record.parent_node_id})")
    if record.phase is RunPhase.WAITING_USER:
        question = History.peek(runs.store.conversation_log(runs.asking(record))).pending_question()
        if question:
            write("Question:  " + question.strip().replace("\n", "\n           "))
    if record.phase is not RunPhase.COMPLETED:
        write(f"Continue:  crewagent run --resume {runs.root_of(record).run_id}")
    for text, reason in _given_up(runs.store, record.run_id):  # the Slack bot's, when it ran there
        write(f"Not shown in Slack ({reason}): " + text.replace("\n", " ")[:200])
    return 0


def _model_span(span: ModelSpan) -> str:
    """`gpt-a (turn 1)`, `gpt-b (turns 2-5)`: which model the run's model calls went to."""
    turns = f"turn {span.first}" if span.turns == 1 else f"turns {span.first}-{span.last}"
    return f"{span.model} ({turns})"


def _given_up(store: RuntimeStore, run_id: str) -> list[tuple[str, str]]:
    if isinstance(store, PostgresRuntimeStore):
        from crewagent.bot.replicas.outbox_table import given_up_in_database

        return given_up_in_database(store.pool, run_id)
    return given_up_for_run(store.home, run_id)
