"""`crewagent chat [PACKAGE] [--project DIR]`: the Agent-First session in a terminal.

The same SessionService as the Slack bot, on the "ide" surface: agents and menus are numbered
lists, questions from the workflow are answered by typing, `*help` lists the commands, `*quit` or end
of input leaves. `*stop`, `*pause` and `*status` typed while a run works act between its turns, as in
Slack (`*help` is answered at once too); Ctrl-C
stops the run the same way and ends the chat with the command that resumes it. Without --project
the chat works in a scratch folder under the runtime home, never in the current directory.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from pathlib import Path

from crewagent.core.api.checkout import Checkout, CheckoutSpec
from crewagent.core.api.runs import Engine, LLMClient, RunManager, RunRecord
from crewagent.core.api.errors import CrewError
from crewagent.core.api.events import RunPhase, engine_events
from .terminal_config import as_terminal_user, file_config, llm_settings, metered, tool_host, with_tool_policy
from crewagent.core.api.sessions import outputs, Session, SessionService, TypedText
from crewagent.core.api.packages import load_package, Package, PackageInvalid
from crewagent.core.api.stores import RuntimeStore

from .exit_codes import EXIT_INTERRUPTED, EXIT_USAGE, EXIT_WAITING
from .package_errors import print_invalid
from .paths import existing_folder, existing_path
from .line_feed import LineFeed, Prompt, stdout_prompt
from .render import (
    EventPrinter,
    InputClosed,
    ReadLine,
    Write,
    agents_line,
    ask_answer,
    render_snapshot,
    stdin_read_line,
    stdout_write,
)
from .run_cmd import engine_settings, resume_hint

EXIT_SETUP = EXIT_USAGE  # the package, the project or a setting cannot be used
DEFAULT_PACKAGE = Path("examples") / "create-story-micro"
SCRATCH_PROJECT = "scratch"
QUIT_WORDS = {"*quit", "*exit", "/quit", "/exit"}
RUN_CONTROLS = ("stop", "pause", "status", "help")  # typed while a run works, these act at once


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(chat(args, stdin_read_line, stdout_write))
    except PackageInvalid as exc:
        print_invalid(Path(args.path) if args.path else default_package() or Path("."), exc.problems)
        return EXIT_SETUP
    except CrewError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_SETUP


def default_package() -> Path | None:
    """examples/create-story-micro from the current directory, else from the source checkout."""
    for base in (Path.cwd(), Path(__file__).resolve().parent.parent):
        candidate = base / DEFAULT_PACKAGE
        if candidate.is_dir():
            return candidate
    return None


async def chat(args: argparse.Namespace, read_line: ReadLine, write: Write, prompt: Prompt = stdout_prompt) -> int:
    """The whole terminal session; raises CrewError/PackageInvalid for setup problems."""
    path = Path(args.path) if args.path else default_package()
    if path is None:
        raise CrewError("USAGE", "give a package path: crewagent chat PACKAGE --project DIR.")
    store = RuntimeStore()
    cfg = file_config(args)
    # What was typed is checked first (package, project), then the model settings.
    package = load_package(existing_path(path), cache_dir=store.packages_dir)
    chosen_project = existing_folder(args.project, option="--project") if args.project else None
    llm = metered(LLMClient(llm_settings(cfg)), store)  # fails early when no model is configured
    tools = tool_host(cfg, store)
    try:
        if chosen_project is not None:
            project = store.check_project(chosen_project)
        else:
            project = scratch_project(store)
            write(
                f"No --project given: working in the scratch project {project} (artifacts are written there). "
                "Pass --project DIR to work on a checkout."
            )
        runs = RunManager(store)
        engine = Engine(store, runs, llm, with_tool_policy(engine_settings(), cfg), tools)
        checkout = Checkout(CheckoutSpec(project=project), store.home)  # git projects: a worktree per run
        service = SessionService(
            [package], project, engine, runs, surface="ide", checkout=checkout, models=cfg.models
        )
        with as_terminal_user():
            return await Terminal(service, package, LineFeed(read_line, prompt), write).run()
    finally:
        await tools.close()
        await llm.aclose()
        store.close()  # the run index folded: an earlier release reads only runs-index.json


def scratch_project(store: RuntimeStore) -> Path:
    """Where a chat without --project writes: one folder kept beside the runtime's own data."""
    folder = store.home / SCRATCH_PROJECT
    folder.mkdir(parents=True, exist_ok=True)
    return store.check_project(folder)


class Terminal:
    """The chat loop: one input at a time, with `*stop` / `*pause` / `*status` and Ctrl-C taken while a run works."""

    def __init__(self, service: SessionService, package: Package, feed: LineFeed, write: Write) -> None:
        self.service, self.feed, self.write = service, feed, write
        self.engine = service.deps.engine
        self.runs = service.deps.runs
        self.session = Session(id="terminal")
        self.screen = Screen(package, write)
        self.interrupted = asyncio.Event()
        self._working: asyncio.Future[object] | None = None
        self._stopping = False
        self._handles_ctrl_c = False

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGINT, self._on_ctrl_c)
            self._handles_ctrl_c = True
        except (RuntimeError, ValueError, NotImplementedError):
            self._handles_ctrl_c = False  # not the main thread: Ctrl-C stays a KeyboardInterrupt
        try:
            return await self._loop()
        except KeyboardInterrupt:
            return self._stopped()
        finally:
            if self._handles_ctrl_c:
                loop.remove_signal_handler(signal.SIGINT)

    @contextmanager
    def _ctrl_c_raises(self) -> Iterator[None]:
        """A widget question reads synchronously: there Ctrl-C must interrupt the read itself."""
        if not self._handles_ctrl_c:
            yield
            return
        loop = asyncio.get_running_loop()
        loop.remove_signal_handler(signal.SIGINT)  # back to KeyboardInterrupt
        try:
            yield
        finally:
            loop.add_signal_handler(signal.SIGINT, self._on_ctrl_c)

    async def _loop(self) -> int:
        session, show = self.session, self.screen.show
        package = self.screen.package
        self.write(
            f"CrewAgent chat: {package.name} {package.version}. Type *help for the commands, *quit to leave; "
            "Ctrl-C stops a working run."
        )
        await self._work(self.service.open(session, "", show))
        while not self.interrupted.is_set():
            pending = session.pending_widget
            if pending is not None:
                try:
                    with self._ctrl_c_raises():
                        answer = ask_answer(pending.payload, self.feed.next_blocking, self.write)
                except InputClosed:
                    return self._input_ended()
                await self._work(self.service.handle_widget_submit(session, answer, show))
                continue
            self.feed.prompt(f"\n{_prompt(session)}> ")
            line = await self._unless_interrupted(self.feed.next())
            if self.interrupted.is_set():
                break
            if line is None:
                return self._input_ended()
            if line.strip().lower() in QUIT_WORDS:
                self.write("Bye.")
                return 0
            if line.strip():
                await self._work(self.service.handle_text(session, line, show))
        return self._stopped()

    async def _work(self, handler: Awaitable[object]) -> None:
        """Run one handler; lines typed meanwhile are read at once: run controls act now, the rest wait."""
        task = self._working = asyncio.ensure_future(handler)
        try:
            while not task.done():
                reader = asyncio.ensure_future(self.feed.fresh())
                await asyncio.wait({task, reader}, return_when=asyncio.FIRST_COMPLETED)
                if not reader.done():
                    reader.cancel()
                    break
                line = reader.result()
                typed = TypedText.parse(line) if line is not None else None
                if typed is not None and self._controls_the_run(typed):
                    await self.service.handle_text(self.session, typed, self.screen.show)
                else:
                    self.feed.hold(line)
            await task
        except asyncio.CancelledError:
            if not self.interrupted.is_set():
                raise
        finally:
            self._working = None

    def _controls_the_run(self, typed: TypedText) -> bool:
        run_id = self.session.run_id
        working = run_id is not None and self.engine.is_pumping(run_id)
        return working and typed.command in RUN_CONTROLS

    async def _unless_interrupted(self, reading: Awaitable[str | None]) -> str | None:
        read = asyncio.ensure_future(reading)
        stop = asyncio.ensure_future(self.interrupted.wait())
        await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
        for task in (read, stop):
            if not task.done():
                task.cancel()
        return read.result() if read.done() and not read.cancelled() else None

    def _on_ctrl_c(self) -> None:
        """First Ctrl-C: a working run stops between turns (it stays resumable); then the chat ends."""
        self.interrupted.set()
        run_id = self.session.run_id
        if run_id and self.engine.is_pumping(run_id) and not self._stopping:
            self._stopping = True
            self.engine.request_stop(run_id)
        elif self._working is not None and not self._working.done():
            self._working.cancel()

    def _stopped(self) -> int:
        record = self._bound_run()
        if record is None:
            self.write("\nStopped.")
            return EXIT_INTERRUPTED
        if record.phase is RunPhase.RUNNING:  # the pump was cut off mid-turn: say where it stands
            record.phase, record.paused = RunPhase.WAITING_USER, True
            self.runs.update(record)
        if record.phase is RunPhase.COMPLETED:
            self.write(f"\nStopped. Run {record.run_id} is complete.")
        else:
            state = "paused" if record.paused else record.phase.value
            self.write(
                f"\nStopped. Run {record.run_id} is saved ({state}); continue it with: {resume_hint(record.run_id)} "
                "(or *resume in crewagent chat)."
            )
        return EXIT_INTERRUPTED

    def _input_ended(self) -> int:
        record = self._bound_run()
        if record is not None and record.phase is not RunPhase.COMPLETED:
            self.write(
                f"\nInput ended while run {record.run_id} waits for you; it is not done. "
                f"Continue it with: {resume_hint(record.run_id)}"
            )
            return EXIT_WAITING
        self.write("Bye.")
        return 0

    def _bound_run(self) -> RunRecord | None:
        run_id = self.session.run_id
        if run_id is None:
            return None
        try:
            return self.runs.get(run_id)
        except CrewError:
            return None


def _prompt(session: Session) -> str:
    if session.mode == "run":
        return "run"
    if session.mode == "agent":
        return session.agent_id or "agent"
    return session.mode


class Screen:
    """Renders session outputs as plain text lines; run events go through the shared EventPrinter."""

    def __init__(self, package: Package, write: Write, pieces: Write | None = None) -> None:
        self.package = package
        self.write = write
        self.events = EventPrinter(package, write, pieces=pieces)
        self.announced: set[str] = set()  # runs whose completion was printed (post-completion chat repeats it)

    async def show(self, output: outputs.Output) -> None:
        w = self.write
        live = self.events.live
        if output.kind == "reply_delta" and output.restart:
            live.restart()
            return
        if output.kind == "reply_delta":
            who = f"{output.agent.icon} {output.agent.name}" if output.agent else "assistant"
            live.piece((output.run_id, output.turn), who, output.text)
            return
        if output.kind == "reply":
            if not live.streamed(output.text):
                who = f"{output.agent.icon} {output.agent.name}" if output.agent else "assistant"
                w(f"\n{who}:\n{output.text.strip()}")
            return
        if output.kind != "run_progress":
            live.end()
        if output.kind == "show_agents":
            w(output.text)
            for n, agent in enumerate(output.agents, 1):
                w(f"  {n}. {agent.icon} {agent.name} ({agent.title}) [{agent.id}]")
        elif output.kind in ("show_menu", "clarify"):
            w("\n" + output.text)
            items = output.items if output.kind == "show_menu" else output.candidates
            for item in items:
                trigger = f"{item.trigger} — " if item.trigger else ""
                note = f"  ({item.unavailable})" if item.unavailable else ""
                w(f"  {item.index}. {trigger}{item.label}{note}")
            if output.kind == "show_menu" and not items:
                w("  (no menu items; just type to talk)")
        elif output.kind == "run_started":
            snap = output.snapshot
            w(f"\nRun {snap.run_id}: {snap.workflow_name} ({snap.steps_total} steps) with {agents_line(snap)}.")
        elif output.kind == "run_progress":
            event = output.event
            own = event.parent_run_id is None  # a sub-workflow's phases are told by its caller's
            failed = isinstance(event, engine_events.PhaseChanged) and event.phase is RunPhase.FAILED
            if not failed:  # a failure is told once, by the error output that follows it
                self.events.show(event)
            if own and isinstance(event, engine_events.PhaseChanged) and event.paused and not event.error_code:
                w(f"\n⏸ {event.reason or 'Paused'}: the run is saved. Type *resume to continue.")
            done = own and isinstance(event, engine_events.PhaseChanged) and event.phase is RunPhase.COMPLETED
            if done and event.run_id not in self.announced:
                self.announced.add(event.run_id)
                artifacts = output.snapshot.artifacts
                w("\n✔ Run complete. " + ("Artifacts:" if artifacts else "No files were written."))
                for rel in artifacts:
                    w(f"  - {rel}")
                if output.snapshot.usage.llm_calls:
                    w(f"  ({output.snapshot.usage.line()})")
                if output.snapshot.branch:
                    w(f"The results are on branch {output.snapshot.branch}. Commit and push them with: "
                      f"crewagent deliver {event.run_id}")
        elif output.kind == "run_status":
            for line in render_snapshot(output.snapshot):
                w(line)
        elif output.kind == "notice":
            w(("! " if output.level == "warning" else "· ") + output.text)
        elif output.kind == "error":
            w(f"✖ {output.message}")
        elif output.kind == "dismissed":
            w(output.text)
        # widgets are asked by the input loop (answered by typing)
