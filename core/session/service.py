"""SessionService: one conversation (a Slack thread, a terminal chat) moving between its modes.

idle → (pick an agent) → AgentMode: input goes through the CommandRouter → a workflow item starts
a run → RunMode: input becomes the run's USER_INPUT, except `*` global commands. ChatMode is a
plain assistant without persona. Every method mutates the Session in place (the surface persists
it) and returns the outputs it produced, which were also passed to `emit` as they happened.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from pathlib import Path
from typing import Literal

from ..checkout.project import Checkout
from ..model.choice import ModelChoice
from ..run.engine import Engine
from ..base.errors import CrewError
from .outputs import Dismissed, ErrorOutput, Notice, Output, RunStatus, ShowAgents
from ..package.models import Package
from ..base.answers import FormAnswer, misfit, refused
from .router import GlobalCommand, resolve
from ..store.run_manager import RunManager
from . import next_step, runmode
from .commands import TypedText, help_text, looks_like_command, unknown_command
from .context import AgentChoice, Catalog, Deps, Emit, OutputStream, Surface
from .agentmode import dispatch, failed_answer, greeting, menu_output, resume_latest
from .lookup import CHAT_WORDS, Startable, names_something, startables, unique_trigger_owner
from .model import Session
from .model_command import choose_model
from .talk import talk

log = logging.getLogger(__name__)

Control = Literal["pause", "stop", "resume", "retry", "status", "menu", "dismiss", "model", "help"]
STALE_WIDGET = "This question was already answered."



class SessionService:
    def __init__(
        self,
        packages: list[Package],
        project_root: Path,
        engine: Engine,
        runs: RunManager,
        *,
        surface: Surface,
        checkout: Checkout | None = None,
        models: ModelChoice | None = None,
    ) -> None:
        if not packages:
            raise CrewError("PACKAGE_NOT_FOUND", "No package is loaded; give at least one package.")
        self.deps = Deps(Catalog(packages), Path(project_root), engine, runs, surface, checkout, models)

    @property
    def catalog(self) -> Catalog:
        return self.deps.catalog

    # ---- entry points ---------------------------------------------------------------

    async def open(self, session: Session, text: str | TypedText = "", emit: Emit | None = None) -> list[Output]:
        """First contact: greet with the agents, or act directly on text that names an agent or a command."""
        out = OutputStream(emit)
        await self._guarded(session, out, self._open(session, _typed(text), out))
        return out.items

    async def handle_text(self, session: Session, text: str | TypedText, emit: Emit | None = None) -> list[Output]:
        """What the person typed; its `*command`, if any, is the one `text` carries (parsed here only if raw)."""
        out = OutputStream(emit)
        await self._guarded(session, out, self._handle_text(session, _typed(text), out))
        return out.items

    async def guest_chat(self, session: Session, text: str, emit: Emit | None = None) -> list[Output]:
        """Someone other than the owner talks in the conversation: a persona (or plain chat) answer only.

        Nothing they type starts, answers or steers anything; menu numbers and triggers are just chat.
        """
        out = OutputStream(emit)
        await self._guarded(session, out, self._guest_chat(session, text, out))
        return out.items

    async def pick_agent(self, session: Session, agent_id: str, emit: Emit | None = None) -> list[Output]:
        out = OutputStream(emit)
        await self._guarded(session, out, self._pick_by_name(session, agent_id, out))
        return out.items

    async def handle_widget_submit(self, session: Session, answer: FormAnswer, emit: Emit | None = None) -> list[Output]:
        """The person's answer to the open question; refused (the question stays open) unless it fits it."""
        out = OutputStream(emit)
        await self._guarded(session, out, self._widget_submit(session, answer, out))
        return out.items

    async def control(self, session: Session, action: Control, emit: Emit | None = None) -> list[Output]:
        """Buttons: exactly what the typed `*<action>` does (plus `retry` for a failed run)."""
        out = OutputStream(emit)
        await self._guarded(session, out, self._global(session, action, out))
        return out.items

    async def start_next(
        self, session: Session, previous_run_id: str, workflow_id: str, emit: Emit | None = None
    ) -> list[Output]:
        """The next step of a cycle (a button under a completed run): its workflow, on the same branch."""
        out = OutputStream(emit)
        await self._guarded(session, out, next_step.start_next(self.deps, session, previous_run_id, workflow_id, out))
        return out.items

    async def _guarded(self, session: Session, out: OutputStream, work: Awaitable[None]) -> None:
        """The session's user boundary, the one place a call's failure is caught: an expected one becomes a
        clear ErrorOutput; anything else is logged once with the session, and never shown as a trace."""
        try:
            await work
        except CrewError as exc:
            await out.put(ErrorOutput(code=exc.code, message=exc.message))
        except Exception:
            log.exception("session call failed", extra={"session": session.id, "mode": session.mode})
            await out.put(
                ErrorOutput(
                    code="UNKNOWN",
                    message="Something went wrong on our side. Try again; if it keeps failing, tell the admins.",
                )
            )

    # ---- idle ----------------------------------------------------------------------

    async def _open(self, session: Session, typed: TypedText, out: OutputStream) -> None:
        if session.mode != "idle":
            await self._handle_text(session, typed, out)
            return
        raw = typed.text.strip()
        choices = self.catalog.choices
        if not raw and len(choices) == 1:
            await self._pick(session, choices[0], out)
            return
        if raw.lower() in CHAT_WORDS:
            await self._enter_chat(session, out)
            return
        if typed.command is not None:
            await self._global(session, typed.command, out, typed.text)
            return
        if looks_like_command(raw) and self._unique_trigger_owner(raw) is None:
            await out.put(Notice(text=f"{unknown_command(raw, self.deps.surface)} Or pick an agent by number or name.", level="warning"))
            await self._show_agents(session, out, lead="")
            return
        if raw.isdigit() and self.catalog.by_number(raw) is None:
            count = len(self.catalog.choices)
            await out.put(
                Notice(text=f"There is no agent number {raw}; pick 1 to {count}, or type a name.", level="warning")
            )
            await self._show_agents(session, out, lead="")
            return
        named = self.catalog.find(raw) or self.catalog.by_number(raw)
        if named is not None:
            await self._pick(session, named, out)
            return
        first, _, rest = raw.partition(" ")
        named = self.catalog.find(first) if rest.strip() else None
        if named is not None:  # "bob create-story"
            await self._pick(session, named, out, quiet=True)
            await self._agent_text(session, rest.strip(), out)
            return
        owner = self._unique_trigger_owner(raw)
        if owner is not None:
            await self._pick(session, owner, out, quiet=True)
            await self._agent_text(session, raw, out)
        elif len(choices) == 1:  # nobody else to choose: that agent answers (its menu is one *menu away)
            await self._pick(session, choices[0], out, quiet=True)
            await self._agent_text(session, raw, out)
        else:
            await self._show_agents(session, out)

    def _unique_trigger_owner(self, text: str) -> AgentChoice | None:
        return unique_trigger_owner(self.catalog, text, self.deps.surface)

    async def _show_agents(self, session: Session, out: OutputStream, lead: str = "Hi! ") -> None:
        names = ", ".join(p.name for p in self.catalog.packages)
        await out.put(
            ShowAgents(
                text=f"{lead}These agents are available ({names}). Pick one by number or name, "
                "or type `chat` for a plain assistant.",
                agents=self.catalog.cards(),
            )
        )

    async def _pick_by_name(self, session: Session, agent_id: str, out: OutputStream) -> None:
        choice = self.catalog.find(agent_id, prefer_package=session.package_id)
        if choice is None and agent_id.strip().lower() in CHAT_WORDS:
            await self._enter_chat(session, out)
            return
        if choice is None:
            known = ", ".join(c.key for c in self.catalog.choices)
            raise CrewError("AGENT_NOT_FOUND", f"There is no agent '{agent_id}'. Available: {known}.")
        await self._pick(session, choice, out)

    async def _pick(self, session: Session, choice: AgentChoice, out: OutputStream, *, quiet: bool = False) -> None:
        """Enter AgentMode; the run a session was bound to stays saved and resumable."""
        if session.run_id and self.deps.engine.is_pumping(session.run_id):
            raise CrewError("RUN_BUSY", "A run is working in this conversation; wait for it or type *stop first.")
        runmode.leave(session)
        session.mode = "agent"
        session.package_id = choice.package.id
        session.agent_id = choice.agent.id
        if not quiet:
            await out.put(menu_output(self.deps, choice.agent, greeting(choice.agent)))

    async def _enter_chat(self, session: Session, out: OutputStream) -> None:
        runmode.leave(session)
        session.mode = "chat"
        session.package_id = session.package_id or self.catalog.packages[0].id
        await out.put(Notice(text="Plain chat: ask me anything about the project. Type *dismiss to leave."))

    async def _guest_chat(self, session: Session, text: str, out: OutputStream) -> None:
        if session.mode == "chat":
            await talk(self.deps, session, self._package(session), None, text, out, mode="chat", guest=True)
            return
        if session.mode == "idle" or not session.agent_id:
            raise CrewError("NO_AGENT", "No agent is active in this conversation, so there is nobody to chat with.")
        package, agent = self.deps.bound(session)
        await talk(self.deps, session, package, agent, text, out, mode="agent", guest=True)

    # ---- routing by mode ---------------------------------------------------------------

    async def _handle_text(self, session: Session, typed: TypedText, out: OutputStream) -> None:
        if session.mode == "idle":
            await self._open(session, typed, out)
            return
        if typed.command is not None:
            await self._global(session, typed.command, out, typed.text)
            return
        text = typed.text
        session.retry_text = None  # a new message replaces a failed one
        if session.mode == "run":
            await self._run_text(session, text, out)
        elif session.mode == "chat":
            package = self._package(session)
            try:
                await talk(self.deps, session, package, None, text, out, mode="chat")
            except CrewError as exc:
                await out.put(failed_answer(session, text, exc))
        else:
            other = self._other_agent_named(session, text)
            if other is not None:  # "Sam" while talking to Bob: switch, as picking Sam from the list would
                await self._pick(session, other, out)
                return
            await self._agent_text(session, text, out)

    def _other_agent_named(self, session: Session, text: str) -> AgentChoice | None:
        """Another agent the whole text names (id, persona name or key), unless the current menu has it as a trigger."""
        choice = self.catalog.find(text, prefer_package=session.package_id)
        if choice is None or (choice.package.id, choice.agent.id) == (session.package_id, session.agent_id):
            return None
        package, agent = self.deps.bound(session)
        cmd = resolve(agent, text, surface=self.deps.surface, workflows=package.workflows)
        return None if cmd.confidence == "exact" and cmd.item_index is not None else choice

    async def _agent_text(self, session: Session, text: str, out: OutputStream) -> None:
        package, agent = self.deps.bound(session)
        cmd = resolve(agent, text, surface=self.deps.surface, workflows=package.workflows)
        if cmd.kind == "Chat" and looks_like_command(text):  # a mistyped command or trigger is not a chat message
            hint = "Type *menu for this agent's menu, or the text without the leading * to ask the agent."
            await out.put(Notice(text=f"{unknown_command(text, self.deps.surface)} {hint}", level="warning"))
            return
        await dispatch(self.deps, session, package, agent, cmd, text, out)

    async def _run_text(self, session: Session, text: str, out: OutputStream) -> None:
        package, agent = self.deps.bound(session)
        starred = looks_like_command(text)
        if session.menu_open or starred:
            session.menu_open = False
            cmd = resolve(agent, text, surface=self.deps.surface, workflows=package.workflows)
            if cmd.confidence == "exact" and cmd.item_index is not None:
                await dispatch(self.deps, session, package, agent, cmd, text, out)
                return
        if starred:  # a mistyped command is not an answer for the model
            hint = "To send it to the run as an answer, type it without the leading *."
            await out.put(Notice(text=f"{unknown_command(text, self.deps.surface)} {hint}", level="warning"))
            return
        await runmode.continue_run(self.deps, session, package, text, out)

    def _package(self, session: Session) -> Package:
        return self.catalog.package(session.package_id) or self.catalog.packages[0]

    # ---- global commands and buttons ------------------------------------------------

    async def _global(
        self, session: Session, command: GlobalCommand | Control, out: OutputStream, text: str = ""
    ) -> None:
        """A `*command` (`text` is what was typed, for its arguments) or the button that does the same."""
        if command == "help":
            await out.put(Notice(text=help_text(self.deps.surface, session.mode)))
            return
        if command == "model":
            await choose_model(self.deps, session, text, out)
            return
        if session.mode == "run" and session.run_id:
            package, agent = self.deps.bound(session)
            if command == "menu":
                session.menu_open = True
                text = "Menu (the run stays open; pick an item to start something else, or keep replying to the run):"
                await out.put(menu_output(self.deps, agent, text))
            else:
                await runmode.control_run(self.deps, session, package, command, out)
            return
        if command == "dismiss":
            if session.mode == "idle":
                await out.put(Notice(text="There is nothing to dismiss."))
                return
            who = "the plain chat" if session.mode == "chat" else (session.agent_id or "the agent")
            runmode.leave(session)
            await out.put(Dismissed(text=f"Left {who}. {self.deps.pick_again}"))
        elif command == "menu":
            if session.mode == "agent":
                _, agent = self.deps.bound(session)
                await out.put(menu_output(self.deps, agent, f"{agent.metadata.icon} {agent.metadata.name}'s menu:"))
            else:
                runmode.leave(session)
                await self._show_agents(session, out, lead="")
        elif command == "resume":
            package = self._package(session)
            await resume_latest(self.deps, session, package, out)
        elif command == "status":
            if session.last_run_id:
                record = self.deps.runs.get(session.last_run_id)
                run_package = self.catalog.package(record.package_id) or self._package(session)
                await out.put(RunStatus(snapshot=self.deps.runs.snapshot(record, run_package)))
            else:
                await out.put(Notice(text="No run has been started in this conversation yet."))
        elif command == "retry" and session.retry_text and session.mode in ("agent", "chat"):
            text, session.retry_text = session.retry_text, None
            await self._handle_text(session, TypedText(text), out)  # a failed answer, never a command
        else:  # pause, stop, retry without a bound run
            await out.put(Notice(text="Nothing is running in this conversation."))

    # ---- widgets ----------------------------------------------------------------------

    async def _widget_submit(self, session: Session, answer: FormAnswer, out: OutputStream) -> None:
        pending = session.pending_widget
        bound_run = session.run_id if session.mode == "run" else None
        if pending is None or pending.widget_id != answer.widget_id or pending.run_id != bound_run:
            await out.put(Notice(text=STALE_WIDGET, level="warning"))
            return
        why = misfit(answer, pending.payload)
        if why is not None:
            log.warning("answer refused", extra={"session": session.id, "widget": answer.widget_id, "why": why})
            raise refused(why)
        session.pending_widget = None
        if pending.run_id is not None:
            package, _ = self.deps.bound(session)
            await runmode.continue_run(self.deps, session, package, answer, out)
        elif session.mode == "chat":
            await talk(self.deps, session, self._package(session), None, answer, out, mode="chat")
        else:
            package, agent = self.deps.bound(session)
            await talk(self.deps, session, package, agent, answer, out, mode="agent")

    # ---- asked without a session: the Home tab and `/crew TEXT` ------------------------

    def names_something(self, text: str) -> bool:
        """True when opening a session with `text` picks an agent, enters chat or starts a command."""
        return names_something(self.catalog, text, self.deps.surface)

    def startables(self) -> list[Startable]:
        """The agents this service offers, each with the triggers of what it can start."""
        return startables(self.catalog, self.deps.surface)


def _typed(text: str | TypedText) -> TypedText:
    return text if isinstance(text, TypedText) else TypedText.parse(text)
