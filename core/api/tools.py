"""Tools: sandbox mounts, the tool host, and the policy for system and MCP tools."""

from __future__ import annotations

from ..tools.mounts import resolve
from ..tools.mcp.server_config import McpServerConfig, server_problems
from ..tools.policy import SystemToolPolicy
from ..tools.base import Mounts
from ..tools.registry import ToolHost

__all__ = [
    "McpServerConfig", "Mounts", "SystemToolPolicy", "ToolHost", "resolve", "server_problems",
]
