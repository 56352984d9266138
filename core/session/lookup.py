"""What a line of text names before any session exists, answered the way opening a session would.

The Home tab lists what each agent can start, and `/crew TEXT` asks whether TEXT would pick an agent,
enter plain chat or start exactly one agent's command; both ask the session service, which answers
from here with the same rules it routes by.
"""

from __future__ import annotations

from dataclasses import dataclass

from .context import AgentChoice, Catalog
from .router import Surface, display_trigger, resolve, visible_items

CHAT_WORDS = {"chat", "*chat", "/chat", "plain chat"}


@dataclass(frozen=True)
class Startable:
    """An agent someone can start, and the triggers of the workflows and scripts on its menu."""

    key: str  # what picks it: the agent id, or "package/agent" when ids clash
    package_id: str
    agent_id: str
    name: str
    title: str
    icon: str
    triggers: tuple[str, ...]


def startables(catalog: Catalog, surface: Surface) -> list[Startable]:
    """Every agent of the catalog in its order, with the triggers shown on this surface."""
    out = []
    for choice in catalog.choices:
        triggers = tuple(
            trigger.lstrip("*")
            for _, item in visible_items(choice.agent, surface)
            if (item.workflow or item.exec) and (trigger := display_trigger(item))
        )
        meta = choice.agent.metadata
        ids = (choice.key, choice.package.id, choice.agent.id)
        out.append(Startable(*ids, meta.name, meta.title, meta.icon, triggers))
    return out


def unique_trigger_owner(catalog: Catalog, text: str, surface: Surface) -> AgentChoice | None:
    """The one agent whose menu has an exact trigger for `text` (numbers are never unique)."""
    if not text or text.lstrip("*").isdigit():
        return None
    owners = []
    for choice in catalog.choices:
        cmd = resolve(choice.agent, text, surface=surface, workflows=choice.package.workflows)
        if cmd.confidence == "exact" and cmd.item_index is not None:
            owners.append(choice)
    return owners[0] if len(owners) == 1 else None


def names_something(catalog: Catalog, text: str, surface: Surface) -> bool:
    """True when opening a session with `text` picks an agent, enters chat or starts one agent's command;
    False when it would only list the agents again."""
    raw = text.strip()
    if not raw or raw.lower() in CHAT_WORDS:
        return True
    if catalog.find(raw) or catalog.by_number(raw):
        return True
    first, _, rest = raw.partition(" ")
    if rest.strip() and catalog.find(first):
        return True
    return unique_trigger_owner(catalog, raw, surface) is not None
