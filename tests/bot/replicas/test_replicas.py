"""Replicas as real `crewagent serve` processes sharing one Postgres, behind the fake Slack.

Each replica has its own CREWAGENT_HOME (nothing is shared through the disk but the project);
the tests deliver events as Slack would, spread over the replicas (signed HTTP deliveries to each,
or envelopes over each replica's Socket Mode connection), and look only at what reaches FakeSlack,
the model, and the shared database.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.fakes import Reply
from tests.support.processes import group_alive, kill_group
from tests.support.scripts import hello_branch_responder, user_inputs
from tests.support.replica_cluster import LEASE_SECONDS, WAIT, cluster, hold_second_call
from tests.support.bot_harness import Mode, artifact_paths, message_text

pytestmark = pytest.mark.slow  # several serve processes on a real Postgres, killed mid-run


def echo(body: dict[str, Any]) -> Reply:
    inputs = user_inputs(body)
    question = inputs[-1] if inputs else str(body["messages"][-1]["content"])
    return Reply(content=f"answer to: {question.splitlines()[-1]}")


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_events_of_one_thread_spread_over_replicas_are_handled_once_each_in_order(
    database_url: str, project: Path, tmp_path: Path, mode: Mode
) -> None:
    async with cluster(database_url, project, tmp_path, mode=mode, package="multi-workflows") as c:
        c.llm.responder = echo
        top = await c.mention("Mary", via=0)
        await c.posted(lambda p: p.get("thread_ts") == top and "[1] Run the hello-linear workflow" in message_text(p))
        sent = []
        for n in range(1, 7):
            envelope = await c.reply(top, f"in order {n}", via=n % 2)
            sent.append(envelope)
        # Slack retries one delivery through the other replica: it must not be handled again.
        await c.event({**sent[2], "retry_attempt": 1}, via=0)
        await c.posted(lambda p: p.get("thread_ts") == top and "answer to: in order 6" in message_text(p))
        answers = [t.splitlines()[0] for t in c.posts(top) if "answer to: in order" in t]
        assert answers == [f"answer to: in order {n}" for n in range(1, 7)]
        asked = [q for body in c.llm.requests for q in user_inputs(body)[-1:] if "in order" in q]
        assert [q.splitlines()[-1] for q in asked] == [f"in order {n}" for n in range(1, 7)]


@pytest.mark.parametrize(("mode", "lease_seconds"), [("http", LEASE_SECONDS), ("socket", LEASE_SECONDS), ("http", None)])
async def test_a_run_whose_replica_is_killed_is_resumed_by_another_without_duplicate_posts(
    database_url: str, project: Path, tmp_path: Path, mode: Mode, lease_seconds: float | None
) -> None:
    """With the default lease too (3 s: a dead replica's runs resume within about that)."""
    async with cluster(database_url, project, tmp_path, mode=mode, lease_seconds=lease_seconds) as c:
        held, release = hold_second_call(c.llm)  # held until its replica is dead
        top = await c.mention("hello-branch", via=0)
        await asyncio.wait_for(held.wait(), WAIT)
        holder = await c.holder(top)
        victim = next(r for r in c.replicas if r.id == holder)
        survivor = next(r for r in c.replicas if r is not victim)
        kill_group(victim.process.pid)
        await victim.process.wait()
        release.set()

        notice = await c.posted(lambda p: p.get("thread_ts") == top and "Picking this run up" in message_text(p))
        assert notice["channel"] == "C1"
        done = await c.posted(lambda p: p.get("thread_ts") == top and "completed." in message_text(p))
        assert "artifacts/plan-greenfield.md" in artifact_paths(done)
        assert (project / "artifacts" / "plan-greenfield.md").is_file()
        assert await c.holder(top) in (None, survivor.id)
        posts = [t for t in c.posts(top) if "Progress:" not in t]
        assert len(posts) == len(set(posts)), f"a message was posted twice: {posts}"
        assert sum("Picking this run up" in t for t in posts) == 1


async def test_stop_sent_to_a_replica_that_is_not_pumping_stops_the_run(
    database_url: str, project: Path, tmp_path: Path
) -> None:
    async with cluster(database_url, project, tmp_path, mode="socket") as c:
        held = asyncio.Event()
        never = asyncio.Event()
        competent = hello_branch_responder(preset_branch="greenfield")

        async def respond(body: dict[str, Any]) -> Reply:
            if len(c.llm.requests) >= 2:
                held.set()
                await never.wait()  # a model call that only a stop ends
            return competent(body)

        c.llm.responder = respond
        top = await c.mention("hello-branch", via=0)
        await asyncio.wait_for(held.wait(), WAIT)
        holder = await c.holder(top)
        other = next(r for r in c.replicas if r.id != holder)
        mark = len(c.slack.calls)
        await c.reply(top, "and make it short", via=other.index)
        note = await c.slack.wait_for("chat.postEphemeral", lambda p: "Still working on the run" in str(p.get("text")),
                                      since=mark, timeout=WAIT)
        assert note["user"] == "U1" and note["thread_ts"] == top
        await c.reply(top, "*stop", via=other.index)
        await c.posted(lambda p: p.get("thread_ts") == top and "Stopping now" in message_text(p), since=mark)
        status = await c.slack.wait_for(
            "chat.update", lambda p: "Paused" in message_text(p) or "Stopped" in message_text(p), since=mark,
            timeout=WAIT,
        )
        assert status["channel"] == "C1"
        assert not (project / "artifacts" / "plan-greenfield.md").exists()
        never.set()


async def test_sigterm_hands_the_threads_over_and_leaves_no_process(
    database_url: str, project: Path, tmp_path: Path
) -> None:
    async with cluster(database_url, project, tmp_path, mode="http", count=1, package="multi-workflows") as c:
        replica = c.replicas[0]
        c.llm.responder = echo
        top = await c.mention("Mary", via=0)
        await c.posted(lambda p: p.get("thread_ts") == top)
        replica.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(replica.process.wait(), 10) == 0
        assert not group_alive(replica.process.pid)
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            cur = await conn.execute("SELECT count(*) FROM crew_replicas")
            assert await cur.fetchone() == (0,)
            cur = await conn.execute("SELECT count(*) FROM crew_leases WHERE replica IS NOT NULL")
            assert await cur.fetchone() == (0,)


async def test_sigterm_mid_run_exits_in_time_and_another_replica_resumes_the_run(
    database_url: str, project: Path, tmp_path: Path
) -> None:
    async with cluster(database_url, project, tmp_path, mode="http") as c:
        held, release = hold_second_call(c.llm)
        top = await c.mention("hello-branch", via=0)
        await asyncio.wait_for(held.wait(), WAIT)
        holder = await c.holder(top)
        leaving = next(r for r in c.replicas if r.id == holder)
        leaving.process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(leaving.process.wait(), 10) == 0  # a container runtime's grace
        assert not group_alive(leaving.process.pid)
        release.set()
        await c.posted(lambda p: p.get("thread_ts") == top and "Picking this run up" in message_text(p))
        done = await c.posted(lambda p: p.get("thread_ts") == top and "completed." in message_text(p))
        assert "artifacts/plan-greenfield.md" in artifact_paths(done)
