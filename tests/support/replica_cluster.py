"""Replicas as real `crewagent serve` processes sharing one Postgres, behind the fake Slack."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psycopg

from tests.support.paths import EXAMPLES, REPO
from tests.support.fakes import APP_TOKEN, BOT_TOKEN, FakeSlack, Reply, ScriptedLLM
from tests.support.fakes.slack_events import (
    app_mention_event, block_actions_payload, deliver_event, deliver_interaction, message_event, new_ts,
)
from tests.support.fakes.slack_api import STREAMED
from tests.support.processes import free_port, kill_group, wait_healthy
from tests.support.bot_harness import SECRET, Mode, element_text, elements, message_text
from tests.support.scripts import hello_branch_responder

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
    replica_env: dict[int, dict[str, str]] = field(default_factory=dict)  # more environment, by replica index

    async def start(self, count: int) -> None:
        config = self.workdir / "crewagent.yml"
        config.write_text(
            (f"lease_seconds: {self.lease_seconds}\n" if self.lease_seconds is not None else "")
            + "limits:\n  status_update_interval: 0.05\n  status_edits_per_second: 200\n  shutdown_grace: 2\n"
            + "  home_refresh_interval: 0.2\n"
            + self.extra_config
        )
        for index in range(count):
            replica = await self._spawn(index)
            self.replicas.append(replica)  # stopped on exit even if it never gets healthy
            await self._ready(replica)
            if self.mode == "socket":
                # Connections are numbered in connecting order: connection i is replica i.
                await self.slack.socket_mode.wait_connections(index + 1, timeout=WAIT)

    async def restart(self, index: int) -> Replica:
        """Start replica `index` again on its home (after it was killed): a new process, a new replica id.
        Over HTTP only (Socket Mode numbers connections in connecting order)."""
        assert self.mode == "http" and self.replicas[index].process.returncode is not None
        replica = self.replicas[index] = await self._spawn(index)
        await self._ready(replica)
        return replica

    async def _spawn(self, index: int) -> Replica:
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
            **self.replica_env.get(index, {}),
        }
        env["SLACK_APP_TOKEN" if self.mode == "socket" else "SLACK_SIGNING_SECRET"] = (
            APP_TOKEN if self.mode == "socket" else SECRET
        )
        packages = [arg for name in self.packages for arg in ("--package", str(EXAMPLES / name))]
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crewagent.cli", "serve", "--project", str(self.project), *packages,
            "--config", str(self.workdir / "crewagent.yml"), "--port", str(port),
            cwd=REPO, env=env, stdout=asyncio.subprocess.DEVNULL,
            stderr=open(self.workdir / f"replica-{index}.log", "ab"),  # noqa: SIM115
            start_new_session=True,
        )
        return Replica(index=index, process=process, port=port, home=home)

    async def _ready(self, replica: Replica) -> None:
        health = await wait_healthy(self.http, replica.health_url, timeout=WAIT)
        replica.id = str(health["replica"])

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

    async def click(self, top: str, label: str, *, user: str, via: int) -> None:
        """Press the button labelled `label` in the thread, as `user`, through replica `via`."""
        hits = [
            (e, m)
            for (ch, _), m in sorted(self.slack.messages.items(), key=lambda item: float(item[0][1]))
            if ch == "C1" and m.get("thread_ts") == top
            for e in elements(m)
            if label in element_text(e)
        ]
        assert hits, f"no {label} button in the thread"
        element, message = hits[-1]
        payload = block_actions_payload(
            element["action_id"], element.get("value"), user=user, channel="C1", message_ts=message["ts"],
            thread_ts=top, block_id=element.get("_block_id", "actions"), action_type=element["type"],
            message_blocks=message.get("blocks"),
        )
        if self.mode == "socket":
            envelope_id = await self.slack.socket_mode.send_envelope("interactive", payload, via=via)
            await self.slack.socket_mode.wait_ack(envelope_id, timeout=WAIT)
        else:
            status, _ = await deliver_interaction(self.http, self.replicas[via].events_url, SECRET, payload)
            assert status == 200

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

    def shows_in_thread(self, top: str, params: dict[str, Any]) -> bool:
        """Whether a Slack call shows something in thread `top`: posts into it, or edits, streams or
        reacts to one of its messages."""
        if params.get("thread_ts") == top:
            return True
        ts = str(params.get("ts") or params.get("timestamp") or "")
        message = self.slack.messages.get((str(params.get("channel")), ts))
        return ts == top or (message is not None and message.get("thread_ts") == top)

    async def logged(self, index: int, needle: str, timeout: float = WAIT) -> None:
        """Wait until replica `index` has logged `needle`."""
        deadline = time.monotonic() + timeout
        while needle not in self.log(index):
            assert time.monotonic() < deadline, f"replica {index} never logged {needle!r}:\n{self.log(index)[-3000:]}"
            await asyncio.sleep(0.1)  # polling a log file: nothing to be called back from

    async def holder(self, top: str) -> str | None:
        async with await psycopg.AsyncConnection.connect(self.database_url, autocommit=True) as conn:
            cur = await conn.execute("SELECT replica FROM crew_leases WHERE thread_key = %s", (f"T1:C1:{top}",))
            row = await cur.fetchone()
        return row[0] if row else None


def hold_second_call(llm: ScriptedLLM, *, preset_branch: str | None = "greenfield") -> tuple[asyncio.Event, asyncio.Event]:
    """A competent hello-branch model whose second call waits: set when it is reached, and the release.
    Without `preset_branch` the run asks its owner greenfield or brownfield after the intake."""
    held, release = asyncio.Event(), asyncio.Event()
    competent = hello_branch_responder(preset_branch=preset_branch)
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
    replica_env: dict[int, dict[str, str]] | None = None,
) -> AsyncIterator[Cluster]:
    """`count` replicas of `crewagent serve` on one Postgres behind a fresh FakeSlack and scripted model; all stopped on exit.

    `replica_env` gives some replicas more environment (their own database URL or bot token)."""
    async with FakeSlack() as slack, ScriptedLLM() as llm, aiohttp.ClientSession() as http:
        c = Cluster(slack, llm, http, database_url, project, tmp_path, mode, (package,), lease_seconds=lease_seconds,
                    extra_config=extra_config, replica_env=replica_env or {})
        try:
            await c.start(count)
            yield c
        finally:
            c.stop_all()
            for replica in c.replicas:
                await replica.process.wait()
