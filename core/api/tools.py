"""Tools: sandbox mounts, the tool host, and the policy for system, MCP and command tools."""

from __future__ import annotations

from ..tools.mounts import resolve
from ..tools.off_limits import OffLimits
from ..tools.mcp.server_config import McpServerConfig
from ..tools.policy import SystemToolPolicy
from ..tools.shell.command_config import CommandsConfig
from ..tools.base import Mounts
from ..tools.registry import ToolHost

__all__ = ["CommandsConfig", "McpServerConfig", "Mounts", "OffLimits", "SystemToolPolicy", "ToolHost", "resolve"]
