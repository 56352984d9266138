"""A small MCP server for the tests, written with the SDK's high-level server class.

`lookup_ticket` is read-only (readOnlyHint); `create_ticket` changes something (it appends to the
file TRACKER_FILE names), so calling it needs the run owner's approval. `crash` ends the process
mid-call and `slow` sleeps, for the failure tests. Run: `python tracker_server.py` (stdio) or
`python tracker_server.py --http PORT` (streamable HTTP on 127.0.0.1).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

try:
    from mcp.server.mcpserver import MCPServer as Server
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef]
from mcp.types import ToolAnnotations

server = Server("tracker")
TICKETS = {"T-1": "Login page is slow", "T-2": "Export to CSV"}


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def lookup_ticket(ticket_id: str) -> str:
    """Look up a ticket by id and return its title."""
    title = TICKETS.get(ticket_id)
    return f"{ticket_id}: {title}" if title else f"no ticket {ticket_id}"


@server.tool(annotations=ToolAnnotations(destructive_hint=True))
def create_ticket(title: str) -> str:
    """Open a new ticket with this title."""
    path = Path(os.environ["TRACKER_FILE"])
    with path.open("a", encoding="utf-8") as f:
        f.write(title + "\n")
    return f"created T-{len(path.read_text().splitlines()) + 2}: {title}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def crash() -> str:
    """End the server process in the middle of the call."""
    os._exit(3)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "done"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def whoami() -> str:
    """The TRACKER_TOKEN this server was given and its process ids (for the tests)."""
    token = os.environ.get("TRACKER_TOKEN", "")
    digest = hashlib.sha256(token.encode()).hexdigest()[:12]
    return f"token={token} token_sha={digest} pid={os.getpid()} pgid={os.getpgid(0)}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def start_helper() -> str:
    """Start a long-running child process (like a server's own worker) and return its pid."""
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    return f"helper={helper.pid}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    elif len(sys.argv) == 3 and sys.argv[1] == "--sse":
        server.run("sse", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run()
