"""Tools: sandbox mounts, the tool host, and the policy for system, MCP and command tools."""

from __future__ import annotations

from ..tools.mounts import resolve
from ..tools.policy import McpServerConfig, SystemToolPolicy, missing_variables, server_name_problem
from ..tools.shell.command_config import CommandsConfig, SandboxExtras
from ..tools.shell.command_sandbox import start_up_line as sandbox_start_up_line
from ..tools.base import Mounts
from ..tools.registry import ToolHost

__all__ = [
    "CommandsConfig", "McpServerConfig", "SandboxExtras", "sandbox_start_up_line", "Mounts", "SystemToolPolicy", "ToolHost", "missing_variables", "resolve",
    "server_name_problem",
]
