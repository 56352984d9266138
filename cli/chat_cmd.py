"""`crewagent chat [PACKAGE] --project DIR`: the Agent-First session in a terminal.

The same SessionService as the Slack bot, on the "ide" surface: agents and menus are numbered
lists, questions from the workflow are answered by typing, `*quit` or end of input leaves.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from core.engine import Engine
from core.errors import CrewError
from core.events import PhaseChanged, RunPhase
from core.llm import LLMClient, LLMSettings
from core.outputs import Output
from core.package.loader import PackageInvalid, load_package
from core.package.models import Package
from core.runs import RunManager
from core.session.model import Session
from core.session.service import SessionService
from core.store import RuntimeStore

from .render import (
    EventPrinter,
    InputClosed,
    ReadLine,
    Write,
    ask_widget,
    render_snapshot,
    stdin_read_line,
    stdout_write,
)

EXIT_SETUP = 2
DEFAULT_PACKAGE = Path("examples") / "create-story-micro"
QUIT_WORDS = {"*quit", "*exit", "/quit", "/exit"}


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(chat(args, stdin_read_line, stdout_write))
    except PackageInvalid as exc:
        print("error: the package is invalid:", file=sys.stderr)
        for problem in exc.problems:
            if getattr(problem, "level", "error") == "error":
                print(f"  {problem}", file=sys.stderr)
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


async def chat(args: argparse.Namespace, read_line: ReadLine, write: Write) -> int:
    """The whole terminal session; raises CrewError/PackageInvalid for setup problems."""
    path = Path(args.path) if args.path else default_package()
    if path is None:
        raise CrewError("USAGE", "give a package path: crewagent chat PACKAGE --project DIR.")
    if not path.exists():
        raise CrewError("PACKAGE_NOT_FOUND", f"there is no package at {path}.")
    store = RuntimeStore()
    project = store.check_project(Path(args.project or "."))
    llm = LLMClient(LLMSettings.from_env())  # fails early when no model is configured
    try:
        package = load_package(path, cache_dir=store.packages_dir)
        runs = RunManager(store)
        service = SessionService([package], project, Engine(store, runs, llm), runs, surface="ide")
        return await _loop(service, package, read_line, write)
    finally:
        await llm.aclose()


async def _loop(service: SessionService, package: Package, read_line: ReadLine, write: Write) -> int:
    session = Session(id="terminal")
    screen = Screen(package, write)
    write(f"CrewAgent chat: {package.name} {package.version}. Type *quit to leave.")
    await service.open(session, "", screen.show)
    while True:
        pending = session.pending_widget
        if pending is not None:
            try:
                value = ask_widget(pending.payload, read_line, write)
            except InputClosed:
                break
            await service.handle_widget_submit(session, pending.widget_id, value, screen.show)
            continue
        line = read_line(f"\n{_prompt(session)}> ")
        if line is None or line.strip().lower() in QUIT_WORDS:
            break
        if line.strip():
            await service.handle_text(session, line, screen.show)
    write("Bye.")
    return 0


def _prompt(session: Session) -> str:
    if session.mode == "run":
        return "run"
    if session.mode == "agent":
        return session.agent_id or "agent"
    return session.mode


class Screen:
    """Renders session outputs as plain text lines; run events go through the shared EventPrinter."""

    def __init__(self, package: Package, write: Write) -> None:
        self.write = write
        self.events = EventPrinter(package, write)
        self.announced: set[str] = set()  # runs whose completion was printed (post-completion chat repeats it)

    async def show(self, output: Output) -> None:
        w = self.write
        if output.kind == "show_agents":
            w(output.text)
            for n, agent in enumerate(output.agents, 1):
                w(f"  {n}. {agent.icon} {agent.name} ({agent.title}) [{agent.id}]")
        elif output.kind in ("show_menu", "clarify"):
            w("\n" + output.text)
            items = output.items if output.kind == "show_menu" else output.candidates
            for item in items:
                trigger = f"{item.trigger} — " if item.trigger else ""
                w(f"  {item.index}. {trigger}{item.label}")
            if output.kind == "show_menu" and not items:
                w("  (no menu items; just type to talk)")
        elif output.kind == "reply":
            who = f"{output.agent.icon} {output.agent.name}" if output.agent else "assistant"
            w(f"\n{who}:\n{output.text.strip()}")
        elif output.kind == "run_started":
            snap = output.snapshot
            w(f"\nRun {snap.run_id}: {snap.workflow_name} ({snap.steps_total} steps) as {snap.agent_name}.")
        elif output.kind == "run_progress":
            self.events.show(output.event)
            event = output.event
            done = isinstance(event, PhaseChanged) and event.phase is RunPhase.COMPLETED
            if done and event.run_id not in self.announced:
                self.announced.add(event.run_id)
                w("\n✔ Run complete. Artifacts:")
                for rel in output.snapshot.artifacts:
                    w(f"  - {rel}")
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
