"""What someone can start: the agents of the channel bindings, as each binding's session service offers them."""

from __future__ import annotations

from collections.abc import Mapping

from crewagent.core.api.sessions import SessionService

from ..threads.channel_binding import BindingRuntime
from .overview import Access
from .tab import AgentEntry


def agent_entries(bindings: Mapping[str, BindingRuntime], access: Access) -> list[AgentEntry]:
    """Every binding's agents once; a channel's own agents say where (channels the bot may not use are left out)."""
    entries: list[AgentEntry] = []
    seen: set[tuple[str, str]] = set()
    allowed = access.allowed_channels
    for name, binding in sorted(bindings.items(), key=lambda item: item[0] != "default"):
        if name != "default" and allowed and name not in allowed:
            continue
        for agent in binding.service.startables():
            if (agent.package_id, agent.agent_id) in seen:
                continue
            seen.add((agent.package_id, agent.agent_id))
            where = "" if name == "default" else f"<#{name}>"
            entries.append(AgentEntry(agent.key, agent.name, agent.title, agent.icon, agent.triggers, where))
    return entries


def agents_list(service: SessionService) -> str:
    """The agents a channel offers, for `/crew` with a name that matches none."""
    return "\n".join(
        f"• {agent.icon} *{agent.name}* ({agent.title}): `/crew {agent.key}`" for agent in service.startables()
    )
