"""The App Home tab (your runs at a glance) and the `/crew` slash command.

- overview.py: one person's runs, read from the thread store and the run index;
- view.py: those runs as Block Kit (the Home view, the `/crew runs` answer);
- publish.py: publishing on open and on phase changes, coalesced and paced;
- command.py: `/crew`; listeners.py: the Bolt listeners; startable.py: what can be started.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from slack_bolt.async_app import AsyncApp

from crewagent.core.api.packages import Package
from crewagent.core.api.runs import RunManager

from ..slack_port import SlackPort
from ..threads.channel_binding import BindingRuntime
from ..threads.intake import ThreadIntake
from ..threads.store import ThreadStore
from .startable import agent_entries
from .command import CrewCommand
from .listeners import HomeListeners
from .overview import Access, RunOverview
from .publish import HomePublisher

if TYPE_CHECKING:  # replicas only: a single process never loads psycopg
    from ..replicas.threads import PostgresThreadStore

__all__ = ["HomePublisher", "wire_home"]


def wire_home(
    app: AsyncApp,
    *,
    port: SlackPort,
    store: ThreadStore | PostgresThreadStore,
    runs: RunManager,
    access: Access,
    bindings: Mapping[str, BindingRuntime],
    dispatcher: ThreadIntake,
    refresh_interval: float,
) -> HomePublisher:
    """Register the Home tab and `/crew` on `app` and follow run phases."""

    def package_of(binding: str, package_id: str) -> Package | None:
        runtime = bindings.get(binding) or bindings["default"]
        found = runtime.package(package_id)
        return found or next((b.package(package_id) for b in bindings.values() if b.package(package_id)), None)

    overview = RunOverview(store, runs, access, package_of)
    agents = agent_entries(bindings, access)
    publisher = HomePublisher(port, overview, lambda: agents, access, store, interval=refresh_interval)
    command = CrewCommand(access=access, dispatcher=dispatcher, publisher=publisher, port=port)
    HomeListeners(publisher, command).register(app)
    dispatcher.phase_watchers.append(publisher.run_changed)
    return publisher
