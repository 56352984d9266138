"""`crewagent run PATH --project DIR` (Workflow-First, in the terminal) and `crewagent run --resume RUN_ID`.

Questions are read from stdin; Ctrl-C stops between turns and leaves the run resumable.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path

from crewagent.core.api.runs import Engine, EngineSettings, LLMClient, PumpResult, RunManager, RunRecord
from crewagent.core.api.sessions import UserInput
from crewagent.core.api.errors import CrewError
from crewagent.core.api.events import RunPhase
from .terminal_config import as_terminal_user, file_config, llm_settings, metered, tool_host, with_tool_policy
from crewagent.core.api.packages import load_package, Package, PackageInvalid
from crewagent.core.api.checkout import Checkout, CheckoutSpec
from crewagent.core.api.stores import RuntimeStore

from .exit_codes import EXIT_BROKEN_PIPE, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_USAGE, EXIT_WAITING
from .package_errors import print_invalid
from .reader_gone import ReaderWatch
from .paths import existing_folder, existing_path
from .render import (
    EventPrinter,
    InputClosed,
    ReadLine,
    Write,
    agents_line,
    ask_answer,
    stdin_read_line,
    stdout_pieces,
    stdout_write,
)

EXIT_SETUP = EXIT_USAGE  # the package, the project or a setting cannot be used


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_main(args, stdin_read_line, stdout_write))
    except PackageInvalid as exc:
        print_invalid(Path(args.path or ""), exc.problems)
        return EXIT_SETUP
    except CrewError as exc:
        _error(exc.message)
        return EXIT_SETUP


def _error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)


def resume_hint(run_id: str) -> str:
    return f"crewagent run --resume {run_id}"


async def _main(args: argparse.Namespace, read_line: ReadLine, write: Write) -> int:
    store = RuntimeStore()
    runs = RunManager(store)
    cfg = file_config(args)
    # What was typed is checked first (run id, package, project), then the model settings.
    if args.resume:
        record = runs.get(args.resume)
        root = runs.root_of(record)
        if root.run_id != record.run_id:
            write(f"Run {record.run_id} is a sub-workflow of run {root.run_id}; resuming that run.")
            record = root
        package = _load_saved_package(record, store)
    else:
        if not args.path:
            raise CrewError("USAGE", "give a package path (crewagent run PATH --project DIR) or --resume RUN_ID.")
        package = load_package(existing_path(args.path), cache_dir=store.packages_dir)
        project = store.check_project(existing_folder(args.project or ".", option="--project"))
    llm = metered(LLMClient(llm_settings(cfg)), store)  # fails early, before a run is created, if no model is set
    tools = tool_host(cfg, store)
    try:
        if args.resume:
            await run_checkout(record, store).ensure(record)  # a pruned worktree comes back from its branch
            intent = "resume"
        else:
            run_id = runs.new_run_id()
            workflow = package.resolve_workflow(args.workflow)
            made = await Checkout(CheckoutSpec(project=project), store.home).new_worktree(run_id, workflow.id)
            for warning in made.warnings if made else ():
                write(f"warning: {warning}")
            worktree = made.worktree if made else None
            record = runs.create(package, args.workflow, args.agent, project, run_id=run_id, worktree=worktree)
            intent = "start"
        if args.token_budget is not None:
            record.token_budget = args.token_budget
            runs.update(record)
        engine = Engine(store, runs, llm, with_tool_policy(engine_settings(), cfg), tools)
        where = where_files_go(record, chosen=bool(args.project) or bool(args.resume))
        with as_terminal_user():
            return await _drive(engine, record, package, intent, read_line, write, where=where)
    finally:
        await tools.close()
        await llm.aclose()
        store.close()  # the run index folded: an earlier release reads only runs-index.json


def engine_settings() -> EngineSettings:
    """The terminal's engine settings: CREWAGENT_RUN_TOKEN_BUDGET caps every run's tokens."""
    raw = os.environ.get("CREWAGENT_RUN_TOKEN_BUDGET", "").strip().replace("_", "")
    if not raw:
        return EngineSettings()
    if not raw.isdigit() or int(raw) < 1:
        raise CrewError("USAGE", f"CREWAGENT_RUN_TOKEN_BUDGET must be a positive whole number of tokens, not {raw!r}.")
    return EngineSettings(run_token_budget=int(raw))


def where_files_go(record: RunRecord, *, chosen: bool) -> str:
    """Said before a run starts: the folder it writes in (and, with no --project, that it is the current one)."""
    if record.worktree is not None:
        return (f"Files are written in {record.worktree.root}, a worktree of {record.project_root} "
                f"on branch {record.worktree.branch}.")
    if chosen:
        return f"Files are written in {record.project_root}."
    return (f"Files are written in {record.project_root} (the current directory; "
            "pass --project DIR to work in another folder).")


def run_checkout(record: RunRecord, store: RuntimeStore) -> Checkout:
    """The checkout a saved run's project is (the bot's clone of a `repo:` is a project like any other)."""
    return Checkout(CheckoutSpec(project=Path(record.project_root)), store.home)


def deliver_hint(record: RunRecord) -> str | None:
    if record.worktree is None:
        return None
    return (
        f"The results are on branch {record.worktree.branch} (worktree {record.worktree.root}).\n"
        f"Commit and push them with: crewagent deliver {record.run_id}"
    )


def _load_saved_package(record: RunRecord, store: RuntimeStore) -> Package:
    if not Path(record.package_root).is_dir():
        raise CrewError(
            "PACKAGE_NOT_FOUND",
            f"The package '{record.package_id}' this run was started with is no longer where it was loaded from.",
        )
    return load_package(record.package_root, cache_dir=store.packages_dir)


async def _drive(
    engine: Engine, record: RunRecord, package: Package, intent: str, read_line: ReadLine, write: Write,
    *, where: str | None = None,
) -> int:
    reader = ReaderWatch(lambda: engine.request_stop(record.run_id))  # `| head`: end the run saved, not cut off
    pieces = reader.guard(stdout_pieces) if write is stdout_write else None
    write = reader.guard(write)
    snapshot = engine.runs.snapshot(record, package)
    if intent == "resume" and record.phase is RunPhase.COMPLETED:
        write(f"Run {record.run_id} is already complete.")
        _print_artifacts(write, snapshot.artifacts)
        _print_delivery(write, record)
        return 0
    if where:
        write(where)
    verb = "Resuming" if intent == "resume" else "Starting"
    write(
        f"{verb} run {record.run_id}: {snapshot.workflow_name} ({snapshot.steps_total} steps) "
        f"with {agents_line(snapshot)}. Ctrl-C stops between turns."
    )
    printer = EventPrinter(package, write, steps_done=snapshot.steps_done, pieces=pieces)
    interrupted = _install_stop_handler(engine, record.run_id)
    user_input: UserInput | None = None
    while True:
        result = await engine.pump(record, package, intent=intent, user_input=user_input, on_event=printer)  # type: ignore[arg-type]
        intent = "continue"
        if reader.gone:
            return EXIT_BROKEN_PIPE  # the run stopped between turns and is saved (nobody reads what it says)
        if result.phase is RunPhase.COMPLETED:
            write(f"\nRun complete. {record.usage.line()}.")
            _print_artifacts(write, engine.runs.snapshot(record, package).artifacts)
            _print_delivery(write, record)
            return 0
        if result.phase is RunPhase.FAILED:
            write(f"Fix the cause, then retry with: {resume_hint(record.run_id)}")
            return EXIT_FAILED
        if result.paused or interrupted.is_set():
            _print_stopped(write, record, result)
            if interrupted.is_set():
                return EXIT_INTERRUPTED
            return EXIT_WAITING if result.error is not None and result.error.code == "RUN_TOKEN_BUDGET" else 0
        try:
            user_input = _answer(result, read_line, write)
        except KeyboardInterrupt:
            _print_stopped(write, record, None)
            return EXIT_INTERRUPTED
        if user_input is None:
            write(
                f"\nInput ended while run {record.run_id} waits for you; it is not done. "
                f"Continue it with: {resume_hint(record.run_id)}"
            )
            return EXIT_WAITING


def _answer(result: PumpResult, read_line: ReadLine, write: Write) -> UserInput | None:
    if result.widget:
        try:
            return ask_answer(result.widget, read_line, write)
        except InputClosed:
            return None
    while True:
        line = read_line("\n> ")
        if line is None:
            return None
        if line.strip():
            return line


def _install_stop_handler(engine: Engine, run_id: str) -> asyncio.Event:
    """Ctrl-C asks the engine to stop between turns instead of killing the process mid-write."""
    interrupted = asyncio.Event()

    def stop() -> None:
        interrupted.set()
        engine.request_stop(run_id)

    try:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop)
    except (RuntimeError, ValueError):
        pass  # not the main thread (tests) or no signal support: Ctrl-C falls back to KeyboardInterrupt
    return interrupted


def _print_stopped(write: Write, record: RunRecord, result: PumpResult | None) -> None:
    run_id = record.run_id
    error = result.error if result else None
    if error is not None and error.code == "RUN_TOKEN_BUDGET":
        write(f"\n{error.message}")
        write(f"Used so far: {record.usage.line()}.")
        higher = 2 * (record.token_budget or record.usage.total_tokens or 1)
        write(f"Continue with a higher budget: {resume_hint(run_id)} --token-budget {higher}")
        return
    why = (error.message if error else None) or "Stopped"
    write(f"\n{why.rstrip('.')}. Run {run_id} is saved and can continue later: {resume_hint(run_id)}")


def _print_artifacts(write: Write, artifacts: list[str]) -> None:
    if not artifacts:
        write("No files were written.")
        return
    write("Artifacts:")
    for path in artifacts:
        write(f"  - {path}")


def _print_delivery(write: Write, record: RunRecord) -> None:
    hint = deliver_hint(record)
    if hint:
        write(hint)
