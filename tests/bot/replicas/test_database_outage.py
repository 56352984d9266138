"""Replicas whose Postgres is stopped and started again on the same port: the owner's answer is taken
once and the run moves on soon after; runs working through a minute-long outage all complete, with
no message lost or shown twice; each replica says so once, and /healthz says "database unreachable"."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from crewagent.bot.outbox.entry import marked_entry
from tests.support.fakes import FakeSlack, Reply, ScriptedLLM
from tests.support.fakes.slack_events import app_mention_event, deliver_event, message_event, new_ts
from tests.support.postgres import PostgresServer
from tests.support.processes import Spawner, kill_group, wait_healthy
from tests.support.scripts import HELLO_LINEAR_ANSWER, current_node, hello_linear_responder, user_inputs
from tests.support.outage_bot import text_of
from tests.support.serve_process import SECRET, start_serve

pytestmark = pytest.mark.slow  # waits out real database outages (10 s, 60 s) under two replicas

WAIT = 90.0
QUESTION = "What is the topic?"
DONE = "completed."
WAIT_NOTE = "can't reach my database"


@dataclass
class Cluster:
    slack: FakeSlack
    http: aiohttp.ClientSession
    ports: list[int] = field(default_factory=list)
    processes: list[Any] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    async def event(self, envelope: dict[str, Any], via: int) -> int:
        status, _ = await deliver_event(self.http, f"http://127.0.0.1:{self.ports[via]}/slack/events", SECRET, envelope)
        return status

    async def mention(self, text: str, via: int) -> str:
        ts = new_ts()
        self.slack.add_message("C1", f"<@UBOT> {text}", ts=ts)
        assert await self.event(app_mention_event(f"<@UBOT> {text}", ts=ts), via) == 200
        return ts

    async def reply(self, top: str, text: str, via: int) -> int:
        ts = new_ts()
        self.slack.add_message("C1", text, ts=ts, thread_ts=top)
        return await self.event(message_event(text, ts=ts, thread_ts=top), via)

    def shown(self, top: str, needle: str) -> list[dict[str, Any]]:
        return [m for m in list(self.slack.messages.values())
                if m.get("thread_ts") == top and m.get("bot_id") and needle in text_of(m)]

    async def until(self, condition: Any, timeout: float = WAIT) -> float:
        """Wait until `condition()` holds, re-checking at each Slack call; returns when (monotonic)."""
        deadline = time.monotonic() + timeout
        while not condition():
            remaining = deadline - time.monotonic()
            assert remaining > 0, "condition never held; the replicas' logs end with:\n" + "\n---\n".join(
                self.log(index)[-6000:] for index in range(len(self.logs)))
            try:
                await self.slack.wait_for(
                    ("chat.postMessage", "chat.update", "chat.stopStream"), since=len(self.slack.calls), timeout=remaining
                )
            except AssertionError:
                pass
        return time.monotonic()

    async def health(self, via: int) -> tuple[int, dict[str, Any]]:
        async with self.http.get(f"http://127.0.0.1:{self.ports[via]}/healthz") as response:
            return response.status, await response.json()

    def log(self, index: int) -> str:
        return self.logs[index].read_text(errors="replace")


async def start_cluster(
    spawn: Spawner, project: Path, tmp_path: Path, slack: FakeSlack, llm: ScriptedLLM, http: aiohttp.ClientSession,
    database_url: str, count: int = 2,
) -> Cluster:
    config = tmp_path / "crewagent.yml"
    config.write_text("lease_seconds: 1.5\nlimits:\n  status_update_interval: 0.05\n  status_edits_per_second: 200\n"
                      "  shutdown_grace: 2\n  max_concurrent_runs: 24\n")
    cluster = Cluster(slack, http)
    for index in range(count):
        home = tmp_path / f"home-{index}"
        process, port = await start_serve(
            spawn, project, home, slack.api_url, llm.base_url, database_url=database_url, config=config
        )
        cluster.processes.append(process)
        cluster.ports.append(port)
        cluster.logs.append(home / "serve.log")
        await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=WAIT)
    return cluster


def lines(text: str, pattern: str) -> int:
    return len(re.findall(pattern, text))


async def test_the_owners_answer_during_a_10_s_database_outage_is_taken_once_and_the_run_moves_on(
    own_postgres: PostgresServer, project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    database_url = own_postgres.url(own_postgres.create_database())
    async with FakeSlack() as slack, ScriptedLLM() as llm, aiohttp.ClientSession() as http:
        llm.responder = hello_linear_responder()
        c = await start_cluster(spawn, project, tmp_path, slack, llm, http, database_url)
        top = await c.mention("hello-linear", via=0)
        await c.until(lambda: bool(c.shown(top, QUESTION)))

        own_postgres.halt()
        down = time.monotonic()
        assert await c.reply(top, HELLO_LINEAR_ANSWER, via=1) == 200  # kept, acknowledged
        await c.until(lambda: bool(c.shown(top, WAIT_NOTE)), timeout=30)  # the answer waited 10 s: one line says so
        status, body = await c.health(0)
        assert status == 503 and body["status"] == "database unreachable"
        assert time.monotonic() - down >= 10.0
        own_postgres.resume()
        back = time.monotonic()

        done_at = await c.until(lambda: bool(c.shown(top, DONE)), timeout=60)
        print(f"database down {back - down:.1f} s; run completed {done_at - back:.1f} s after it was back")
        assert done_at - back <= 15.0
        assert len(c.shown(top, DONE)) == 1 and len(c.shown(top, QUESTION)) == 1 and len(c.shown(top, WAIT_NOTE)) == 1
        taken = [r for r in llm.requests if HELLO_LINEAR_ANSWER in user_inputs(r)]
        assert taken and all(user_inputs(r).count(HELLO_LINEAR_ANSWER) == 1 for r in taken)
        assert len([r for r in taken if current_node(r) == "step-01-ask"]) == 1, "the answer was taken once"
        for index in range(2):
            assert c.processes[index].returncode is None
            await wait_healthy(http, f"http://127.0.0.1:{c.ports[index]}/healthz", timeout=WAIT)
            log = c.log(index)
            assert lines(log, "lost contact with the database") == 1, log[-3000:]
            assert lines(log, "the database is reachable again") == 1, log[-3000:]
        for process in c.processes:
            kill_group(process.pid)


RUNS = 20
OUTAGE_SECONDS = 60.0


async def test_twenty_runs_working_through_a_minute_without_the_database_all_complete_with_no_message_lost_or_twice(
    own_postgres: PostgresServer, project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    database_url = own_postgres.url(own_postgres.create_database())
    competent = hello_linear_responder()
    held = 0
    arrived = asyncio.Condition()
    release = asyncio.Event()

    async def respond(body: dict[str, Any]) -> Reply:
        nonlocal held
        if current_node(body) == "step-02-generate" and not release.is_set():
            async with arrived:
                held += 1
                arrived.notify_all()
            await release.wait()  # the runs are mid-turn when the database goes
        return competent(body)

    async with FakeSlack() as slack, ScriptedLLM() as llm, aiohttp.ClientSession() as http:
        llm.responder = respond
        c = await start_cluster(spawn, project, tmp_path, slack, llm, http, database_url)
        tops = [await c.mention("hello-linear", via=i % 2) for i in range(RUNS)]
        await c.until(lambda: all(c.shown(top, QUESTION) for top in tops), timeout=WAIT * 2)
        for i, top in enumerate(tops):
            assert await c.reply(top, HELLO_LINEAR_ANSWER, via=(i + 1) % 2) == 200
        async with asyncio.timeout(WAIT * 2), arrived:
            await arrived.wait_for(lambda: held >= RUNS)

        own_postgres.halt()
        down = time.monotonic()
        release.set()  # the runs go on working without their database
        status, body = await c.health(0)
        assert status == 503 and body["status"] == "database unreachable"
        await asyncio.sleep(OUTAGE_SECONDS - (time.monotonic() - down))  # the fault itself lasts a minute
        own_postgres.resume()
        back = time.monotonic()

        done_at = await c.until(lambda: all(c.shown(top, DONE) for top in tops), timeout=WAIT * 2)
        print(f"{RUNS} runs completed {done_at - back:.1f} s after a {back - down:.0f} s database outage")
        entries = [e for m in list(slack.messages.values()) if (e := marked_entry(m)) is not None]
        assert len(entries) == len(set(entries)), "an outbox entry was shown twice"
        for top in tops:
            assert len(c.shown(top, DONE)) == 1 and len(c.shown(top, QUESTION)) == 1
            posted = [text_of(m) for m in c.shown(top, "") if marked_entry(m) is not None]
            assert len(posted) == len(set(posted)), f"a message was shown twice in {top}: {posted}"
        for index in range(2):
            assert c.processes[index].returncode is None
            await wait_healthy(http, f"http://127.0.0.1:{c.ports[index]}/healthz", timeout=WAIT)
            assert lines(c.log(index), "lost contact with the database") == 1
        for process in c.processes:
            kill_group(process.pid)


async def test_an_event_that_cannot_be_recorded_gets_no_ack_and_its_redelivery_is_handled_once(
    own_postgres: PostgresServer, project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    database_url = own_postgres.url(own_postgres.create_database())
    (tmp_path / "home-0" / "slack" / "away-inbox.sqlite").mkdir(parents=True)  # the away-inbox cannot be written
    async with FakeSlack() as slack, ScriptedLLM() as llm, aiohttp.ClientSession() as http:
        llm.responder = hello_linear_responder()
        c = await start_cluster(spawn, project, tmp_path, slack, llm, http, database_url, count=1)
        top = new_ts()
        slack.add_message("C1", "<@UBOT> hello-linear", ts=top)
        envelope = app_mention_event("<@UBOT> hello-linear", ts=top)
        url = f"http://127.0.0.1:{c.ports[0]}/slack/events"

        own_postgres.halt()
        status, _ = await deliver_event(http, url, SECRET, envelope)
        assert status >= 500, "not recorded anywhere: no ack, so Slack delivers it again"
        own_postgres.resume()
        status, _ = await deliver_event(http, url, SECRET, envelope, retry_num=1, retry_reason="http_error")
        assert status == 200
        await c.until(lambda: bool(c.shown(top, QUESTION)))
        status, _ = await deliver_event(http, url, SECRET, envelope, retry_num=2, retry_reason="http_error")
        assert status == 200
        await wait_healthy(http, f"http://127.0.0.1:{c.ports[0]}/healthz", timeout=WAIT)
        mentions = [r for r in llm.requests if current_node(r) == "step-01-ask"]
        assert len(c.shown(top, QUESTION)) == 1 and len(mentions) == 1
        kill_group(c.processes[0].pid)


ROUNDS = 5


async def test_runs_finishing_through_repeated_10_s_outages_end_once_with_the_model_asked_as_often_as_without(
    own_postgres: PostgresServer, project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    """Each round a run is mid-turn after the owner's answer when the database goes for 10 s; its
    ending (closing text, completion notice) is shown once and nothing is asked of the model twice."""
    database_url = own_postgres.url(own_postgres.create_database())
    competent = hello_linear_responder()
    reached, release = asyncio.Event(), asyncio.Event()

    async def respond(body: dict[str, Any]) -> Reply:
        if current_node(body) == "step-02-generate" and not release.is_set():
            reached.set()
            await release.wait()  # the run is mid-turn when the database goes
        return competent(body)

    async with FakeSlack() as slack, ScriptedLLM() as llm, aiohttp.ClientSession() as http:
        llm.responder = respond
        c = await start_cluster(spawn, project, tmp_path, slack, llm, http, database_url)
        calls: list[int] = []
        tops: list[str] = []
        for round_ in range(ROUNDS + 2):  # round 0 counts one run's model calls; the last one is a sentinel
            outage = 0 < round_ <= ROUNDS
            before = len(llm.requests)
            reached.clear()
            release.clear()
            top = await c.mention("hello-linear", via=round_ % 2)
            await c.until(lambda: bool(c.shown(top, QUESTION)))
            assert await c.reply(top, HELLO_LINEAR_ANSWER, via=(round_ + 1) % 2) == 200
            await asyncio.wait_for(reached.wait(), WAIT)
            if outage:
                own_postgres.halt()
                down = time.monotonic()
                release.set()
                await asyncio.sleep(10.0 - (time.monotonic() - down))  # the fault itself lasts 10 s
                own_postgres.resume()
            release.set()
            await c.until(lambda: bool(c.shown(top, DONE)))
            calls.append(len(llm.requests) - before)
            tops.append(top)
        # A late ending of one round would have shown up by the end of the rounds after it.
        for round_, top in enumerate(tops):
            posted = [text_of(m) for m in c.shown(top, "") if marked_entry(m) is not None]
            assert len(posted) == len(set(posted)), f"round {round_}: a message was shown twice: {posted}"
            assert len(c.shown(top, DONE)) == 1 and not c.shown(top, "resuming this run"), f"round {round_}"
        assert calls == [calls[0]] * len(calls), f"model calls per round (round 0 without an outage): {calls}"
        for process in c.processes:
            kill_group(process.pid)

