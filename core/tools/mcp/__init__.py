"""MCP servers behind the tool registry: config (`mcp_servers:`), connections, tool adapter, approvals.

Importing this package does not import the mcp SDK; `hub_for` does, only when servers are configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from .server_config import McpServerConfig

if TYPE_CHECKING:
    from .hub import McpHub


def hub_for(servers: Mapping[str, McpServerConfig], home: Path | None) -> McpHub | None:
    """The process's hub for `servers` (None when there are none); stdio servers log to HOME/logs/mcp."""
    if not servers:
        return None
    from .hub import McpHub

    return McpHub(servers, errlog_dir=home / "logs" / "mcp" if home is not None else None)
