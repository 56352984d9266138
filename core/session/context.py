"""What every session handler needs: the packages and their agents, the engine, and an outbox.

The outbox collects a call's outputs (the return value) and forwards each one to the surface's
`emit` as it happens, so a Slack thread or a terminal can render a run while it is pumping.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from ..checkout.project import Checkout
from ..model.choice import ModelChoice
from ..run.engine import Engine
from ..base.errors import CrewError
from .outputs import AgentCard, Output
from ..package.models import Agent, Package
from ..store.run_manager import RunManager
from ..tools.base import Mounts
from .model import Session
from .router import Surface

log = logging.getLogger(__name__)

Emit = Callable[[Output], Awaitable[None]]


class OutputStream:
    """A session call's one stream of outputs: kept for the caller, and handed to the surface as they happen."""

    def __init__(self, emit: Emit | None) -> None:
        self.items: list[Output] = []
        self._emit = emit

    @property
    def streams(self) -> bool:
        """Someone renders outputs as they happen, so text pieces are worth producing."""
        return self._emit is not None

    async def put(self, output: Output) -> None:
        if output.kind != "reply_delta":  # pieces are only for the live surface; the Reply holds them all
            self.items.append(output)
        if self._emit is None:
            return
        try:
            await self._emit(output)
        except Exception:  # a rendering bug in a surface must not break the session or a run
            log.exception("session emit failed for %s output", output.kind)


def card(agent: Agent, key: str | None = None) -> AgentCard:
    meta = agent.metadata
    return AgentCard(id=key or agent.id, name=meta.name, title=meta.title, icon=meta.icon)


@dataclass(frozen=True)
class AgentChoice:
    package: Package
    agent: Agent
    key: str  # what a surface passes to pick_agent: the agent id, or "package/agent" when ids clash


class Catalog:
    """Every agent of every package, addressable by id, persona name or "package/agent"."""

    def __init__(self, packages: list[Package]) -> None:
        self.packages = packages
        counts: dict[str, int] = {}
        for package in packages:
            for agent in package.agents:
                counts[agent.id] = counts.get(agent.id, 0) + 1
        self.choices = [
            AgentChoice(package, agent, agent.id if counts[agent.id] == 1 else f"{package.id}/{agent.id}")
            for package in packages
            for agent in package.agents
        ]

    def package(self, package_id: str | None) -> Package | None:
        return next((p for p in self.packages if p.id == package_id), None)

    def find(self, name: str, prefer_package: str | None = None) -> AgentChoice | None:
        """By key, id or persona name (case-insensitive); the session's own package wins a clash."""
        key = name.strip().lstrip("*@").strip().lower()
        if not key:
            return None
        hits = [
            c
            for c in self.choices
            if key in (c.key.lower(), c.agent.id.lower(), c.agent.metadata.name.lower())
        ]
        preferred = [c for c in hits if c.package.id == prefer_package]
        return (preferred or hits or [None])[0]

    def by_number(self, text: str) -> AgentChoice | None:
        raw = text.strip()
        if raw.isdigit() and 1 <= int(raw) <= len(self.choices):
            return self.choices[int(raw) - 1]
        return None

    def cards(self) -> list[AgentCard]:
        return [card(c.agent, c.key) for c in self.choices]


@dataclass
class Deps:
    catalog: Catalog
    project_root: Path
    engine: Engine
    runs: RunManager
    surface: Surface
    checkout: Checkout | None = None  # None: runs work in project_root itself
    models: ModelChoice | None = None  # what `*model` may pick; None: only the configured model

    def mounts(self, package: Package) -> Mounts:
        return Mounts(project=self.project_root, pkg=package.root, state=None, off_limits=self.engine.off_limits)

    # ---- what to do next, in the surface's words (a terminal has no mentions or buttons) ----

    @property
    def pick_again(self) -> str:
        if self.surface == "web":
            return "Mention me again to pick an agent."
        return "Type an agent's number or name to pick one."

    @property
    def retry_hint(self) -> str:
        return "press Retry (or type *resume) to continue" if self.surface == "web" else "type *resume to try again"

    @property
    def resume_later(self) -> str:
        if self.surface == "web":
            return "mention me again and type *resume to continue it"
        return "type *resume to continue it"

    def bound(self, session: Session) -> tuple[Package, Agent]:
        """The session's package and agent; a clear error if the surface lost them (e.g. after a reload)."""
        package = self.catalog.package(session.package_id)
        if package is None:
            raise CrewError(
                "PACKAGE_NOT_FOUND",
                f"The package '{session.package_id}' of this conversation is no longer loaded. "
                "Start a new conversation.",
            )
        agent = package.agent(session.agent_id or "")
        if agent is None:
            raise CrewError(
                "AGENT_NOT_FOUND",
                f"The agent '{session.agent_id}' is not in package '{package.id}' any more. Pick another agent.",
            )
        return package, agent
