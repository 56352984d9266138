"""A stand-in for the bot process in the orphan test: starts the tracker through the hub, prints the
server's pid and process group, then waits to be killed."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from crewagent.core.tools.mcp.hub import McpHub
from tests.support.mcp.tracker import tracker_config


async def main(tickets: str) -> None:
    hub = McpHub({"tracker": tracker_config(Path(tickets))})
    await hub.discover(["tracker"])
    tool = hub.find("tracker__whoami", ["tracker"], changes_allowed=True)
    assert tool is not None
    result = await hub.call(tool, {}, 10_000)
    helper = hub.find("tracker__start_helper", ["tracker"], changes_allowed=True)
    assert helper is not None
    started = await hub.call(helper, {}, 10_000)
    print(result["content"], started["content"], flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
