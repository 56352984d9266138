"""Replicas as real `crewagent serve` processes sharing one Postgres, behind the fake Slack.

Each replica has its own CREWAGENT_HOME (nothing is shared through the disk but the project);
the tests deliver events as Slack would, spread over the replicas (signed HTTP deliveries to each,
or envelopes over each replica's Socket Mode connection), and look only at what reaches FakeSlack,
the model, and the shared database.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest

from tests.conftest import EXAMPLES, REPO
from tests.fakes import APP_TOKEN, BOT_TOKEN, FakeSlack, Reply, ScriptedLLM
from tests.fakes.slack_events import app_mention_event, deliver_event, message_event, new_ts
from tests.fakes.slack_api import STREAMED
from tests.processes import free_port, group_alive, kill_group, wait_healthy
from tests.scripts import hello_branch_responder, user_inputs
from tests.test_bot_support import SECRET, Mode, artifact_paths, message_text

LEASE_SECONDS = 1.5
WAIT = 60.0  # generous upper bound for anything a busy 2-core machine does across processes


@dataclass
class Replica:
    index: int
    process: asyncio.subprocess.Process
    port: int
    home: Path
    id: str = ""

    @property
    def events_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/slack/events"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/healthz"


@dataclass
class Cluster:
    slack: FakeSlack
    llm: ScriptedLLM
    http: aiohttp.ClientSession
    database_url: str
    project: Path
    workdir: Path
    mode: Mode
    packages: tuple[str, ...]
    replicas: list[Replica] = field(default_factory=list)
    lease_seconds: float | None = LEASE_SECONDS  # None: the default
    extra_config: str = ""  # more crewagent.yml, appended

    async def start(self, count: int) -> None:
        config = self.workdir / "crewagent.yml"
        config.write_text(
            (f"lease_seconds: {self.lease_seconds}\n" if self.lease_seconds is not None else "")
            + "limits:\n  status_update_interval: 0.05\n  status_edits_per_second: 200\n  shutdown_grace: 2\n"
            + "  home_refresh_interval: 0.2\n"
            + self.extra_config
        )
        for index in range(count):
            home = self.workdir / f"home-{index}"
            port = free_port()
            env = {
                **os.environ,
                "SLACK_BOT_TOKEN": BOT_TOKEN,
                "SLACK_API_URL": self.slack.api_url,
                "CREWAGENT_MODEL": "scripted",
                "OPENAI_BASE_URL": self.llm.base_url,
                "OPENAI_API_KEY": "test",
                "CREWAGENT_HOME": str(home),
                "CREWAGENT_DATABASE_URL": self.database_url,
            }
            env["SLACK_APP_TOKEN" if self.mode == "socket" else "SLACK_SIGNING_SECRET"] = (
                APP_TOKEN if self.mode == "socket" else SECRET
            )
            packages = [arg for name in self.packages for arg in ("--package", str(EXAMPLES / name))]
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "cli", "serve", "--project", str(self.project), *packages,
                "--config", str(config), "--port", str(port),
                cwd=REPO, env=env, stdout=asyncio.subprocess.DEVNULL,
                stderr=open(self.workdir / f"replica-{index}.log", "wb"),  # noqa: SIM115
                start_new_session=True,
            )
            replica = Replica(index=index, process=process, port=port, home=home)
            self.replicas.append(replica)
            health = await wait_healthy(self.http, replica.health_url, timeout=WAIT)
            replica.id = str(health["replica"])
            if self.mode == "socket":
                # Connections are numbered in connecting order: connection i is replica i.
                await self.slack.socket_mode.wait_connections(index + 1, timeout=WAIT)

    def stop_all(self) -> None:
        for replica in self.replicas:
            kill_group(replica.process.pid)

    def log(self, index: int) -> str:
        return (self.workdir / f"replica-{index}.log").read_text(errors="replace")

    # ---- Slack traffic -----------------------------------------------------------

    async def event(self, envelope: dict[str, Any], *, via: int) -> None:
        if self.mode == "socket":
            envelope_id = await self.slack.socket_mode.send_envelope("events_api", envelope, via=via)
            await self.slack.socket_mode.wait_ack(envelope_id, timeout=WAIT)
            return
        status, _ = await deliver_event(self.http, self.replicas[via].events_url, SECRET, envelope)
        assert status == 200

    async def mention(self, text: str, *, via: int, ts: str | None = None) -> str:
        ts = ts or new_ts()
        self.slack.add_message("C1", f"<@UBOT> {text}", user="U1", ts=ts)
        await self.event(app_mention_event(f"<@UBOT> {text}", ts=ts), via=via)
        return ts

    async def reply(self, top: str, text: str, *, via: int) -> dict[str, Any]:
        ts = new_ts()
        self.slack.add_message("C1", text, user="U1", ts=ts, thread_ts=top)
        envelope = message_event(text, ts=ts, thread_ts=top)
        await self.event(envelope, via=via)
        return envelope

    # ---- what users see ------------------------------------------------------------

    async def posted(self, predicate: Callable[[dict[str, Any]], bool], *, since: int = 0) -> dict[str, Any]:
        """A message users see in the thread: posted whole, or a reply whose stream has finished."""
        return await self.slack.wait_for(("chat.postMessage", STREAMED), predicate, timeout=WAIT, since=since)

    def posts(self, top: str) -> list[str]:
        return [
            message_text(call.params)
            for call in self.slack.calls
            if call.method in ("chat.postMessage", STREAMED) and call.params.get("thread_ts") == top
        ]

    async def holder(self, top: str) -> str | None:
        async with await psycopg.AsyncConnection.connect(self.database_url, autocommit=True) as conn:
            cur = await conn.execute("SELECT replica FROM crew_leases WHERE thread_key = %s", (f"T1:C1:{top}",))
            row = await cur.fetchone()
        return row[0] if row else None


def hold_second_call(llm: ScriptedLLM) -> tuple[asyncio.Event, asyncio.Event]:
    """A competent hello-branch model whose second call waits: set when it is reached, and the release."""
    held, release = asyncio.Event(), asyncio.Event()
    competent = hello_branch_responder(preset_branch="greenfield")
    calls = 0

    async def respond(body: dict[str, Any]) -> Reply:
        nonlocal calls
        calls += 1
        if calls == 2:
            held.set()
            await release.wait()
        return competent(body)

    llm.responder = respond
    return held, release


@asynccontextmanager
async def cluster(
    database_url: str, project: Path, tmp_path: Path, *, mode: Mode, count: int = 2, package: str = "hello-branch",
    lease_seconds: float | None = LEASE_SECONDS,
    extra_config: str = "",
) -> AsyncIterator[Cluster]:
    async with FakeSlack() as slack, ScriptedLLM() as llm, aiohttp.ClientSession() as http:
        c = Cluster(slack, llm, http, database_url, project, tmp_path, mode, (package,), lease_seconds=lease_seconds,
                    extra_config=extra_config)
        try:
            await c.start(count)
            yield c
        finally:
            c.stop_all()
            for replica in c.replicas:
                await replica.process.wait()


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

        notice = await c.posted(lambda p: p.get("thread_ts") == top and "resuming this run" in message_text(p))
        assert notice["channel"] == "C1"
        done = await c.posted(lambda p: p.get("thread_ts") == top and "completed." in message_text(p))
        assert "artifacts/plan-greenfield.md" in artifact_paths(done)
        assert (project / "artifacts" / "plan-greenfield.md").is_file()
        assert await c.holder(top) in (None, survivor.id)
        posts = [t for t in c.posts(top) if "Progress:" not in t]
        assert len(posts) == len(set(posts)), f"a message was posted twice: {posts}"
        assert sum("resuming this run" in t for t in posts) == 1


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
        await c.posted(lambda p: p.get("thread_ts") == top and "resuming this run" in message_text(p))
        done = await c.posted(lambda p: p.get("thread_ts") == top and "completed." in message_text(p))
        assert "artifacts/plan-greenfield.md" in artifact_paths(done)
