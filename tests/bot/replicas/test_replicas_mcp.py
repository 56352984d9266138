"""An MCP approval waiting in a thread survives the death of its replica: another one takes the
thread over, the owner's Approve reaches it, and the call is made once. The dead replica's stdio
server does not outlive it."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.support.fakes.slack_events import block_actions_payload, deliver_interaction
from tests.support.mcp.tracker import ASK, CREATED, TRACKER_SERVER, TrackerModel, mcp_package
from tests.support.processes import kill_group
from tests.support.bot_harness import SECRET, element_text, elements, message_text
from tests.support.replica_cluster import WAIT, cluster

pytestmark = pytest.mark.slow  # two serve processes on a real Postgres, one killed


def _servers(tickets: Path) -> str:
    servers = {"tracker": {"command": sys.executable, "args": [str(TRACKER_SERVER)],
                           "env": {"TRACKER_FILE": str(tickets)}}}
    return "mcp_servers: " + json.dumps(servers) + "\n"


async def _settled(c, top: str) -> None:
    """Until the thread has no driver and its run is no longer `running` in the shared database."""
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        async with await psycopg.AsyncConnection.connect(c.database_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT r.phase FROM crew_threads t JOIN crew_runs r ON r.run_id = t.run_id WHERE t.key = %s",
                (f"T1:C1:{top}",),
            )
            row = await cur.fetchone()
        if row is not None and row[0] != "running" and await c.holder(top) is None:
            return
        await asyncio.sleep(0.1)  # polling another process's database rows
    raise AssertionError("the thread never settled")


async def test_approval_is_pressed_after_its_replica_died(database_url: str, project: Path, tmp_path: Path) -> None:
    tickets = tmp_path / "tickets.txt"
    tickets.write_text("", encoding="utf-8")
    package = str(mcp_package(tmp_path))
    async with cluster(database_url, project, tmp_path, mode="http", package=package,
                       extra_config=_servers(tickets)) as c:
        c.llm.responder = TrackerModel()
        top = await c.mention("hello-linear", via=0)
        await c.posted(lambda p: p.get("thread_ts") == top and ASK in message_text(p))
        mark = len(c.slack.calls)
        await c.reply(top, "open a ticket", via=0)
        await c.posted(lambda p: p.get("thread_ts") == top and "Approve a tool call?" in message_text(p), since=mark)
        await _settled(c, top)  # the turn is over and saved: the question waits
        worked = [r for r in c.replicas if any((r.home / "projects").glob("*/runs/*/state/workflow.md"))]
        assert len(worked) == 1  # the replica that ran the turns (an idle thread holds no lease)
        victim = worked[0]
        survivor = next(r for r in c.replicas if r is not victim)
        kill_group(victim.process.pid)
        await victim.process.wait()

        questions = [m for m in c.slack.messages.values()
                     if m.get("thread_ts") == top and any(element_text(e) == "Approve" for e in elements(m))]
        assert len(questions) == 1, [message_text(m)[:200] for m in c.slack.messages.values()]
        question = questions[0]
        approve = next(e for e in elements(question) if element_text(e) == "Approve")
        payload = block_actions_payload(
            approve["action_id"], approve.get("value"), user="U1", channel="C1", message_ts=question["ts"],
            thread_ts=top, block_id=approve.get("_block_id", "actions"), action_type="button",
            message_text=str(question.get("text") or ""), message_blocks=question.get("blocks"),
        )
        status, _ = await deliver_interaction(c.http, survivor.events_url, SECRET, payload)
        assert status == 200
        await c.posted(lambda p: p.get("thread_ts") == top and CREATED in message_text(p))
        assert tickets.read_text() == "Fix the login page\n"
        assert sum(CREATED in t for t in c.posts(top)) == 1
