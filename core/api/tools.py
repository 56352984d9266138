"""Tools: sandbox mounts, the tool host, and the policy for system and MCP tools."""

from __future__ import annotations

from ..tools.mounts import resolve
from ..tools.policy import McpServerConfig, SystemToolPolicy, missing_variables, server_name_problem
from ..tools.base import Mounts
from ..tools.registry import ToolHost

__all__ = [
    "McpServerConfig", "Mounts", "SystemToolPolicy", "ToolHost", "missing_variables", "resolve",
    "server_name_problem",
]
