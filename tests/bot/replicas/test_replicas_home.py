"""`/crew` and the Home tab across two `crewagent serve` replicas sharing one Postgres.

The command arrives at one replica, the thread's later events and the Home tab at the other; what
each person sees comes from the shared stores (threads by owner, runs by conversation).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.fakes.slack_events import app_home_opened_event, deliver_command
from tests.support.scripts import hello_branch_responder
from tests.support.bot_harness import SECRET, Mode, message_text
from tests.support.replica_cluster import WAIT, Cluster, cluster

pytestmark = pytest.mark.slow  # two serve processes on a real Postgres

ALICE, BOB = "UALICE", "UBOB"


async def command(c: Cluster, text: str, *, user: str, via: int, channel: str = "C1") -> dict[str, Any]:
    payload = c.slack.command_payload("/crew", text, user=user, channel=channel)
    if c.mode == "socket":
        envelope_id = await c.slack.socket_mode.send_envelope("slash_commands", payload, via=via)
        await c.slack.socket_mode.wait_ack(envelope_id, timeout=WAIT)
    else:
        status, _ = await deliver_command(c.http, c.replicas[via].events_url, SECRET, payload)
        assert status == 200
    return payload


def view_text(view: dict[str, Any]) -> str:
    return message_text({"blocks": view.get("blocks") or []})


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_crew_on_one_replica_and_the_home_tab_on_the_other(
    database_url: str, project: Path, tmp_path: Path, mode: Mode
) -> None:
    async with cluster(database_url, project, tmp_path, mode=mode) as c:
        c.llm.responder = hello_branch_responder()
        await command(c, "hello-branch", user=ALICE, via=0)
        root = await c.slack.wait_for("chat.postMessage", lambda p: not p.get("thread_ts"), timeout=WAIT)
        top = next(ts for (ch, ts), m in c.slack.messages.items() if ch == "C1" and m.get("text") == root["text"])
        await c.posted(lambda p: p.get("thread_ts") == top and "greenfield" in message_text(p).lower())
        await c.slack.wait_for("chat.update", lambda p: "Waiting for your reply" in message_text(p), timeout=WAIT)

        payload = await command(c, "runs", user=ALICE, via=1, channel="C7")
        name = payload["response_url"].rsplit("/", 1)[-1]
        answer = await c.slack.wait_for("response_url", lambda p: p.get("_name") == name, timeout=WAIT)
        assert "*Waiting for you* (1)" in message_text(answer) and "<#C1>" in message_text(answer)

        payload = await command(c, "runs", user=BOB, via=1)
        name = payload["response_url"].rsplit("/", 1)[-1]
        answer = await c.slack.wait_for("response_url", lambda p: p.get("_name") == name, timeout=WAIT)
        assert "You have no runs yet." in message_text(answer)  # alice's run is hers alone

        mark = len(c.slack.calls)
        await c.event(app_home_opened_event(ALICE), via=1)
        view = await c.slack.wait_for("views.publish", lambda p: p.get("user_id") == ALICE, since=mark, timeout=WAIT)
        assert "*Waiting for you* (1)" in view_text(view["view"])

        # Alice answers in the thread (through the other replica): her Home tab follows the run.
        mark = len(c.slack.calls)
        await c.click(top, "Greenfield", user=ALICE, via=0)
        done = await c.slack.wait_for(
            "views.publish",
            lambda p: p.get("user_id") == ALICE and "*Recently completed* (1)" in view_text(p["view"]),
            since=mark,
            timeout=WAIT,
        )
        assert "Waiting for you" not in view_text(done["view"])
