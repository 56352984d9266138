"""What someone can start, and whether `/crew TEXT` names it: the agents of the channel bindings."""

from __future__ import annotations

from collections.abc import Mapping

from core.api.sessions import CHAT_WORDS, display_trigger, resolve, SessionService, visible_items

from ..threads.channel_binding import BindingRuntime
from .overview import Access
from .view import AgentEntry


def agent_entries(bindings: Mapping[str, BindingRuntime], access: Access) -> list[AgentEntry]:
    """Every binding's agents once; a channel's own agents say where (channels the bot may not use are left out)."""
    entries: list[AgentEntry] = []
    seen: set[tuple[str, str]] = set()
    allowed = access.allowed_channels
    for name, binding in sorted(bindings.items(), key=lambda item: item[0] != "default"):
        if name != "default" and allowed and name not in allowed:
            continue
        for choice in binding.service.catalog.choices:
            ident = (choice.package.id, choice.agent.id)
            if ident in seen:
                continue
            seen.add(ident)
            triggers = tuple(
                trigger.lstrip("*")
                for _, item in visible_items(choice.agent, "web")
                if (item.workflow or item.exec) and (trigger := display_trigger(item))
            )
            meta = choice.agent.metadata
            where = "" if name == "default" else f"<#{name}>"
            entries.append(AgentEntry(choice.key, meta.name, meta.title, meta.icon, triggers, where))
    return entries


def names_something(service: SessionService, text: str) -> bool:
    """True when a mention with `text` would pick an agent or start one agent's command (as `@crew TEXT` does)."""
    raw = text.strip()
    if not raw or raw.lower() in CHAT_WORDS:
        return True
    catalog = service.catalog
    if catalog.find(raw) or catalog.by_number(raw):
        return True
    first, _, rest = raw.partition(" ")
    if rest.strip() and catalog.find(first):
        return True
    if raw.lstrip("*").isdigit():
        return False
    owners = [
        choice
        for choice in catalog.choices
        if (cmd := resolve(choice.agent, raw, surface="web", workflows=choice.package.workflows)).confidence == "exact"
        and cmd.item_index is not None
    ]
    return len(owners) == 1


def agents_list(service: SessionService) -> str:
    """The agents a channel offers, for `/crew` with a name that matches none."""
    lines = [
        f"• {c.agent.metadata.icon} *{c.agent.metadata.name}* ({c.agent.metadata.title}): `/crew {c.key}`"
        for c in service.catalog.choices
    ]
    return "\n".join(lines)
