"""Shared pieces of the MCP tests: the tracker server's config, a package whose agents have MCP
policies, and a scripted model that looks a ticket up, opens one, and reports what happened.

The package is examples/multi-workflows with two policies changed: the analyst (hello-linear's
first step) may use the `tracker` server; the architect (its second step) only `time`, so it must
never see or reach the tracker's tools.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from crewagent.core.tools.mcp.server_config import McpServerConfig
from tests.support.fakes.llm_server import Reply
from tests.support.scripts import (
    EXAMPLES,
    Body,
    calls,
    complete_node,
    current_node,
    is_post_completion,
    messages,
    previous_results,
    write,
    _post_completion_reply,
)

TRACKER_SERVER = Path(__file__).with_name("tracker_server.py")
LOOKUP = "tracker__lookup_ticket"
CREATE = "tracker__create_ticket"
# Each answer ends asking what next, as a model in a workflow step does (a bare report would be nudged).
LOOKED_UP = "T-1 is 'Login page is slow'. What next?"
CREATED = "Done: the ticket is open. Anything else?"
NOT_CREATED = "I did not open the ticket: the call was denied, so nothing changed in the tracker. What next?"
ASK = "What should I do with the tracker?"


def tracker_config(tickets_file: Path, **extra: Any) -> McpServerConfig:
    return McpServerConfig(
        command=sys.executable,
        args=[str(TRACKER_SERVER)],
        env={"TRACKER_FILE": str(tickets_file), "TRACKER_TOKEN": "${TRACKER_TOKEN}"},
        **({"timeout_seconds": 30} | extra),
    )


def mcp_package(tmp_path: Path) -> Path:
    """multi-workflows, analyst allowed `tracker`, architect allowed only `time`."""
    root = tmp_path / "mcp-package"
    shutil.copytree(EXAMPLES / "multi-workflows", root)
    agents_file = root / "agents.json"
    data = json.loads(agents_file.read_text(encoding="utf-8"))
    for agent in data["agents"]:
        servers = ["tracker"] if agent["id"] == "analyst" else ["time"]
        agent.setdefault("tools", {})["mcp"] = {"enabled": True, "allowedServers": servers}
    agents_file.write_text(json.dumps(data, indent=2), encoding="utf-8")
    return root


def tool_names(body: Body) -> list[str]:
    return [str(t.get("function", {}).get("name")) for t in body.get("tools") or []]


def _last_user(body: Body) -> str:
    for message in reversed(messages(body)):
        if message.get("role") == "user":
            return str(message.get("content") or "")
        if message.get("role") == "tool":
            return ""
    return ""


class TrackerModel:
    """Reads the request like a model would: 'look up' → the read-only tool; 'open a ticket' → the one
    that needs approval; its tool result (the real outcome once the owner decided) → says what
    happened; 'go on' → finishes the workflow (the architect's step tries the tracker anyway, and
    must be refused)."""

    def __init__(self) -> None:
        self.offered: dict[str, list[str]] = {}  # node → tool names the model was offered there
        self.refusals: list[dict[str, Any]] = []

    def __call__(self, body: Body) -> Reply:
        node = current_node(body) or "post"
        self.offered.setdefault(node, tool_names(body))
        if is_post_completion(body):
            return _post_completion_reply(body, "All done.")
        results = previous_results(body)
        last = _last_user(body)
        if results and results[-1].get("tool") == "create_ticket":
            return Reply(content=CREATED)
        if results and (results[-1].get("error") or {}).get("code") == "MCP_CALL_DENIED":
            return Reply(content=NOT_CREATED)
        if results and results[-1].get("server") == "tracker":
            return Reply(content=LOOKED_UP)
        if node == "step-02-generate":
            if not results:
                return calls((LOOKUP, {"ticket_id": "T-2"}))
            self.refusals.append(results[-1])
            return calls(
                write("@project/artifacts/hello-linear/result.md", "# Result\n"),
                complete_node(node, to="end-99", artifacts=["artifacts/hello-linear/result.md"]),
            )
        if node == "end-99":
            return calls(complete_node(node, to=None, variables={"workflowStatus": "complete"}))
        if "look up" in last:
            return calls((LOOKUP, {"ticket_id": "T-1"}))
        if "open a ticket" in last:
            return calls((CREATE, {"title": "Fix the login page"}))
        if "go on" in last:
            return calls(
                write("@project/artifacts/hello-linear/input.md", "# Input\n"),
                complete_node("step-01-ask", to="step-02-generate", artifacts=["artifacts/hello-linear/input.md"]),
            )
        return Reply(content=ASK)
