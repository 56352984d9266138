"""System tool settings merged with an agent's `tools` block: agents can only tighten.

The same EffectivePolicy drives the prompt's tool-policy text, which tools are offered, and
what the tools enforce, so the three never disagree.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..package.models import Agent
from .base import EffectivePolicy
from .shell.command_config import CommandsConfig


class SystemToolPolicy(BaseModel):
    """`tool_policy:` in crewagent.yml; an agent's own `tools` in agents.json can only narrow it."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    fs_enabled: bool = True
    """The file tools (fs_read, fs_write, …) for every agent."""
    max_read_bytes: int = Field(default=524_288, gt=0)
    """Bytes one read (or MCP result) may return."""
    max_write_bytes: int = Field(default=2_097_152, gt=0)
    """Bytes one write may store."""
    mcp_enabled: bool | None = None  # default: on when mcp_servers lists any server
    """MCP tools for every agent (default: on when mcp_servers lists any server)."""
    servers: tuple[str, ...] = Field(default=(), exclude=True)  # set from `mcp_servers:`, not a YAML key
    commands: CommandsConfig | None = Field(default=None, exclude=True)  # set from `commands:`, not a YAML key
    hidden: tuple[str, ...] = Field(default=(), exclude=True)  # set at start-up: the config file (the engine adds its home)

    @property
    def mcp_on(self) -> bool:
        return self.mcp_enabled if self.mcp_enabled is not None else bool(self.servers)


def effective_policy(system: SystemToolPolicy, agent: Agent | None) -> EffectivePolicy:
    fs = agent.tools.fs if agent and agent.tools else None
    mcp = agent.tools.mcp if agent and agent.tools else None
    shell = agent.tools.shell if agent and agent.tools else None
    requested = system.mcp_on and (mcp.enabled if mcp and mcp.enabled is not None else True)
    return EffectivePolicy(
        fs_enabled=system.fs_enabled and (fs.enabled if fs and fs.enabled is not None else True),
        max_read_bytes=_tightest(system.max_read_bytes, fs.maxReadBytes if fs else None),
        max_write_bytes=_tightest(system.max_write_bytes, fs.maxWriteBytes if fs else None),
        mcp_requested=requested,
        mcp_servers=tuple(
            s for s in system.servers if mcp is None or mcp.allowedServers is None or s in mcp.allowedServers
        ) if requested else (),
        shell=system.commands if not (shell and shell.enabled is False) else None,
    )


def _tightest(system_limit: int, agent_limit: int | None) -> int:
    if agent_limit is None or agent_limit <= 0:
        return system_limit
    return min(system_limit, agent_limit)
