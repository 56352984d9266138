"""Real MCP servers through the hub: the tracker over stdio and streamable HTTP, the published
mcp-server-time, and servers that crash, hang, or never start."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import sys
import time
from pathlib import Path

import pytest
from mcp import types

from crewagent.core.tools.base import EffectivePolicy, Mounts, ToolContext
from crewagent.core.tools.mcp.adapter import adapt
from crewagent.core.tools.mcp.server_config import McpServerConfig
from crewagent.core.tools.mcp.hub import McpHub
from crewagent.core.tools.registry import ToolHost
from tests.support.mcp.tracker import TRACKER_SERVER, tracker_config
from tests.support.processes import free_port, group_alive
from tests.support.paths import REPO

pytestmark = pytest.mark.slow  # real MCP server processes, crashed and timed out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie waiting for its parent counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


async def _gone(pid: int, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        await asyncio.sleep(0.05)  # polling a process that is not ours to wait for
    return False


def _pids(result: dict) -> tuple[int, int]:
    text = result["content"]
    return int(text.split("pid=")[1].split()[0]), int(text.split("pgid=")[1].split()[0])


@pytest.fixture
def tickets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRACKER_TOKEN", "tok-from-env")
    path = tmp_path / "tickets.txt"
    path.write_text("", encoding="utf-8")
    return path


async def test_stdio_server_lists_calls_and_is_ended_with_its_group(tickets: Path) -> None:
    hub = McpHub({"tracker": tracker_config(tickets)})
    try:
        await hub.discover(["tracker"])
        tools = {t.wire: t for t in hub.tools(["tracker"], changes_allowed=True)}
        assert {"tracker__lookup_ticket", "tracker__create_ticket"} <= set(tools)
        assert tools["tracker__lookup_ticket"].read_only and not tools["tracker__lookup_ticket"].needs_approval
        assert tools["tracker__create_ticket"].needs_approval
        assert tools["tracker__lookup_ticket"].schema["required"] == ["ticket_id"]
        assert [t.wire for t in hub.tools(["tracker"], changes_allowed=False)].count("tracker__create_ticket") == 0
        found = await hub.call(tools["tracker__lookup_ticket"], {"ticket_id": "T-1"}, 10_000)
        assert found == {"ok": True, "server": "tracker", "tool": "lookup_ticket", "content": "T-1: Login page is slow"}
        who = await hub.call(tools["tracker__whoami"], {}, 10_000)
        digest = hashlib.sha256(b"tok-from-env").hexdigest()[:12]
        assert f"token_sha={digest}" in who["content"]  # ${TRACKER_TOKEN} came from the environment
        assert "token=*** " in who["content"] and "tok-from-env" not in str(who)  # and is masked when echoed
        pid, pgid = _pids(who)
        assert pgid != os.getpgid(0)  # its own process group
        again = await hub.call(tools["tracker__whoami"], {}, 10_000)
        assert _pids(again) == (pid, pgid)  # started once, reused
    finally:
        await hub.close()
    assert await _gone(pid) and not group_alive(pgid)


@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_http_servers_with_headers(tickets: Path, spawn, transport: str) -> None:
    port = free_port()
    await spawn(sys.executable, str(TRACKER_SERVER), f"--{transport}", str(port),
                env={**os.environ, "TRACKER_FILE": str(tickets)}, stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL)
    path = "mcp" if transport == "http" else "sse"
    config = McpServerConfig(url=f"http://127.0.0.1:{port}/{path}", headers={"Authorization": "Bearer ${TRACKER_TOKEN}"},
                             timeout_seconds=10, type="sse" if transport == "sse" else None)
    hub = McpHub({"web": config}, retry_after=0)
    try:
        deadline = time.monotonic() + 30
        while not hub.catalogue.get("web") and time.monotonic() < deadline:
            await hub.discover(["web"])  # the server process may still be starting
            await asyncio.sleep(0.1)
        tool = hub.find("web__lookup_ticket", ["web"], changes_allowed=False)
        assert tool is not None
        result = await hub.call(tool, {"ticket_id": "T-2"}, 10_000)
        assert result["ok"] and result["content"] == "T-2: Export to CSV"
    finally:
        await hub.close()


async def test_published_time_server_is_listed_called_and_stopped() -> None:
    pytest.importorskip("mcp_server_time")
    config = McpServerConfig(command=sys.executable, args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
                             timeout_seconds=30)
    hub = McpHub({"time": config})
    try:
        await hub.discover(["time"])
        names = [t.wire for t in hub.tools(["time"], changes_allowed=True)]
        assert "time__get_current_time" in names and "time__convert_time" in names
        tool = hub.find("time__get_current_time", ["time"], changes_allowed=True)
        assert tool is not None
        result = await hub.call(tool, {"timezone": "Europe/Paris"}, 10_000)
        assert result["ok"] and "Europe/Paris" in result["content"]
        bad = await hub.call(tool, {"timezone": "Mars/Olympus"}, 10_000)
        assert bad["ok"] is False and bad["error"]["code"] == "MCP_TOOL_ERROR"
    finally:
        await hub.close()
    assert hub.connections["time"].session is None


async def test_crashed_server_is_restarted_on_the_next_call(tickets: Path) -> None:
    hub = McpHub({"tracker": tracker_config(tickets)})
    try:
        await hub.discover(["tracker"])
        crash = hub.find("tracker__crash", ["tracker"], changes_allowed=True)
        lookup = hub.find("tracker__lookup_ticket", ["tracker"], changes_allowed=True)
        assert crash and lookup
        down = await hub.call(crash, {}, 1000)
        assert down["error"]["code"] == "MCP_SERVER_CRASHED" and "started again" in down["error"]["message"]
        up = await hub.call(lookup, {"ticket_id": "T-1"}, 1000)
        assert up["ok"] and hub.connections["tracker"].starts == 2
    finally:
        await hub.close()


async def test_every_call_has_a_timeout(tickets: Path) -> None:
    hub = McpHub({"tracker": tracker_config(tickets, timeout_seconds=1)})
    try:
        await hub.discover(["tracker"])
        slow = hub.find("tracker__slow", ["tracker"], changes_allowed=True)
        assert slow is not None
        result = await hub.call(slow, {"seconds": 30}, 1000)
        assert result["error"]["code"] == "MCP_TIMEOUT"
    finally:
        await hub.close()


async def test_servers_that_cannot_start_are_left_out_with_the_reason_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HIDDEN_KEY", "hunter2-secret")
    hang = tmp_path / "hang.py"
    hang.write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    hub = McpHub({
        "missing": McpServerConfig(command="/nonexistent/mcp-server", args=["--key", "${HIDDEN_KEY}"], timeout_seconds=5),
        "hangs": McpServerConfig(command=sys.executable, args=[str(hang)], timeout_seconds=1),
        "nohost": McpServerConfig(url="http://127.0.0.1:9/mcp?key=${HIDDEN_KEY}", timeout_seconds=2),
    })
    caplog.set_level(logging.WARNING)
    started = time.monotonic()
    try:
        await hub.discover(hub.names)
        assert time.monotonic() - started < 40  # bounded by each server's timeout, not stuck
        assert hub.tools(hub.names, changes_allowed=True) == []
    finally:
        await hub.close()
    logged = caplog.text
    for name in ("missing", "hangs", "nohost"):
        assert f"MCP server {name} is not available" in logged
    assert "within 10 s" in logged
    assert "hunter2-secret" not in logged


def test_malformed_schemas_and_bad_names_drop_only_those_tools() -> None:
    listed = [
        types.Tool(name="good", input_schema={"type": "object", "properties": {"q": {"type": "string"}}}),
        types.Tool(name="bad schema", input_schema={"type": "object"}),
        types.Tool(name="broken", input_schema={"type": "object", "properties": {"q": {"type": 12}}}),
        types.Tool(name="array", input_schema={"type": "array"}),
        types.Tool(name="x" * 70, input_schema={"type": "object"}),
    ]
    tools, problems = adapt("srv", McpServerConfig(command="x"), listed)
    assert [t.wire for t in tools] == ["srv__good"]
    assert len(problems) == 4 and any("malformed" in p for p in problems)
    only, missing = adapt("srv", McpServerConfig(command="x", tools=["good", "absent"]), listed)
    assert [t.wire for t in only] == ["srv__good"] and "absent" in missing[0]


async def test_arguments_are_checked_against_the_schema_and_other_servers_are_out_of_reach(
    tickets: Path, project: Path
) -> None:
    hub = McpHub({"tracker": tracker_config(tickets), "other": tracker_config(tickets)})
    host = ToolHost(hub)
    allowed = ToolContext(Mounts(project=project, pkg=project), EffectivePolicy(mcp_servers=("tracker",)), "run", "a")
    try:
        await host.prepare(allowed)
        assert "other" not in hub.catalogue  # never started: no agent here may use it
        names = [s["function"]["name"] for s in host.specs(allowed)]
        assert "tracker__lookup_ticket" in names and not any(n.startswith("other__") for n in names)
        wrong = await host.execute("tracker__lookup_ticket", '{"ticket_id": 7}', allowed)
        assert wrong.result["error"]["code"] == "E_INVALID_ARGS" and "ticket_id" in wrong.result["error"]["message"]
        for name in ("other__lookup_ticket", "other__create_ticket", "tracker__nope", "lookup_ticket"):
            refused = await host.execute(name, '{"ticket_id": "T-1"}', allowed)
            assert refused.result["error"]["code"] == "TOOL_NOT_AVAILABLE", name
        chat = ToolContext(Mounts(project=project, pkg=project), EffectivePolicy(mcp_servers=("tracker",)), "agent", "a")
        assert "tracker__create_ticket" not in [s["function"]["name"] for s in host.specs(chat)]
        refused = await host.execute("tracker__create_ticket", '{"title": "x"}', chat)
        assert refused.result["error"]["code"] == "TOOL_NOT_AVAILABLE"
        assert tickets.read_text() == ""
    finally:
        await host.close()


async def test_no_orphan_after_kill_9_of_the_process_that_started_it(tickets: Path, spawn) -> None:
    repo = REPO
    holder = await spawn(sys.executable, "-m", "tests.support.mcp.holder", str(tickets), cwd=str(repo),
                         stdout=asyncio.subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(repo)})
    assert holder.stdout is not None
    line = await asyncio.wait_for(holder.stdout.readline(), 60)
    pid = int(line.decode().split("pid=")[1].split()[0])
    pgid = int(line.decode().split("pgid=")[1].split()[0])
    helper = int(line.decode().split("helper=")[1].split()[0])
    assert _alive(pid) and _alive(helper) and pgid != holder.pid
    os.kill(holder.pid, 9)  # the "bot" only: the server lives in its own group
    await holder.wait()
    assert await _gone(pid), "the MCP server outlived the process that started it"
    assert await _gone(helper), "a process the MCP server started outlived the bot"
    deadline = time.monotonic() + 20
    while group_alive(pgid) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    assert not group_alive(pgid)
