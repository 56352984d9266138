"""Harness for the bot tests: the real Bolt app over FakeSlack + ScriptedLLM.

Every helper waits on what the user would see (a recorded Slack call) with a bounded timeout;
nothing sleeps to synchronise. The bound (WAIT) only matters when a test fails, so it is generous:
CI runs on a busy 2-core machine, where a passing step can take several seconds.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp

from crewagent.bot.serve.app import CrewBot, build
from crewagent.bot.config import Access, BotConfig, load_config
from crewagent.core.model.client import LLMSettings
from tests.support.paths import EXAMPLES
from tests.support.fakes import BOT_TOKEN, APP_TOKEN, FakeSlack, ScriptedLLM
from tests.support.fakes.slack_api import STREAMED
from tests.support.fakes.slack_events import (
    app_home_opened_event,
    app_mention_event,
    block_actions_payload,
    deliver_command,
    deliver_event,
    deliver_interaction,
    message_event,
    new_ts,
    view_submission_payload,
)

SECRET = "test-signing-secret"
WAIT = 30.0  # seconds any one wait may take before the test fails
Mode = Literal["http", "socket"]


def make_config(
    slack: FakeSlack,
    project: Path,
    packages: Sequence[str],
    *,
    mode: Mode = "http",
    home: Path | None = None,
    max_runs: int = 8,
    access: Access | None = None,
    interval: float = 0.05,
    config_file: Path | None = None,
) -> BotConfig:
    env = {"SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_API_URL": slack.api_url, "CREWAGENT_MODEL": "scripted"}
    if mode == "socket":
        env["SLACK_APP_TOKEN"] = APP_TOKEN
    else:
        env["SLACK_SIGNING_SECRET"] = SECRET
    if home is not None:
        env["CREWAGENT_HOME"] = str(home)
    config = load_config(config_path=config_file, project=project, packages=[EXAMPLES / p for p in packages], env=env)
    config.limits.max_concurrent_runs = max_runs
    config.limits.status_update_interval = interval
    config.limits.status_edits_per_second = 200.0
    config.limits.stream_flush_interval = 0.0  # every piece goes out: tests see each append
    config.limits.status_line_interval = 0.0
    config.limits.status_lines_per_second = 200.0
    config.limits.shutdown_grace = 5.0
    if access is not None:
        config.access = access
    return config


@dataclass
class Harness:
    slack: FakeSlack
    llm: ScriptedLLM
    project: Path
    config: BotConfig
    mode: Mode
    http: aiohttp.ClientSession
    bot: CrewBot | None = None
    url: str = ""
    team: str = "T1"
    bots: list[CrewBot] = field(default_factory=list)
    llm_retries: int = 0  # model calls fail at once unless a test wants the client's retries
    llm_settings: dict[str, Any] = field(default_factory=dict)  # overrides for the bot's model client

    # ---- lifecycle ----------------------------------------------------------------

    async def start(self) -> CrewBot:
        values: dict[str, Any] = {
            "model": "scripted", "base_url": self.llm.base_url, "max_retries": self.llm_retries, "timeout": 10
        }
        settings = LLMSettings(**{**values, **self.llm_settings})
        bot = build(self.config, llm_settings=settings)
        self.bots.append(bot)
        self.bot = bot
        async with asyncio.timeout(WAIT):  # start-up retries an unreachable Slack forever
            if self.mode == "socket":
                await bot.start_socket()
                await self.slack.socket_mode.wait_connected()
            else:
                port = await bot.start_http("127.0.0.1", 0)
                self.url = f"http://127.0.0.1:{port}/slack/events"
        return bot

    async def restart(self, *, grace: float = 0.0) -> CrewBot:
        """Stop the bot like a crash at a turn boundary (grace 0 cancels in-flight work), start a fresh one."""
        assert self.bot is not None
        await close_bot(self.bot, grace)
        return await self.start()

    # ---- delivering Slack traffic ---------------------------------------------------

    async def event(self, envelope: dict[str, Any]) -> int:
        if self.mode == "socket":
            envelope_id = await self.slack.socket_mode.send_envelope("events_api", envelope)
            await self.slack.socket_mode.wait_ack(envelope_id)
            return 200
        status, _ = await deliver_event(self.http, self.url, SECRET, envelope)
        return status

    async def interaction(self, payload: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        """Deliver a block_actions / view_submission payload; returns (status, ack body)."""
        if self.mode == "socket":
            envelope_id = await self.slack.socket_mode.send_envelope("interactive", payload)
            ack = await self.slack.socket_mode.wait_ack(envelope_id)
            return 200, ack.get("payload")
        status, text = await deliver_interaction(self.http, self.url, SECRET, payload)
        return status, (json.loads(text) if text.strip().startswith("{") else None)

    async def command(
        self, text: str = "", *, user: str = "U1", channel: str = "C1", name: str = "/crew"
    ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """Type a slash command: (the delivered payload, the ack's body if it had one)."""
        payload = self.slack.command_payload(name, text, user=user, channel=channel)
        if self.mode == "socket":
            envelope_id = await self.slack.socket_mode.send_envelope("slash_commands", payload)
            ack = await self.slack.socket_mode.wait_ack(envelope_id)
            return payload, ack.get("payload")
        status, body = await deliver_command(self.http, self.url, SECRET, payload)
        assert status == 200, body
        return payload, (json.loads(body) if body.strip().startswith("{") else None)

    async def home_opened(self, user: str = "U1", *, view: dict[str, Any] | None = None) -> None:
        assert await self.event(app_home_opened_event(user, view=view)) == 200

    async def home_view(
        self, user: str, predicate: Callable[[dict[str, Any]], bool] = lambda v: True, *, since: int = 0
    ) -> dict[str, Any]:
        """The next Home view published for `user` (since `since`) that satisfies `predicate`."""
        params = await self.slack.wait_for(
            "views.publish", lambda p: p.get("user_id") == user and predicate(p["view"]), since=since, timeout=WAIT
        )
        return dict(params["view"])

    async def mention(
        self, text: str, *, channel: str = "C1", user: str = "U1", thread_ts: str | None = None, ts: str | None = None
    ) -> str:
        ts = ts or new_ts()
        self.slack.add_message(channel, f"<@UBOT> {text}", user=user, ts=ts, thread_ts=thread_ts)
        event = app_mention_event(f"<@UBOT> {text}".strip(), channel=channel, ts=ts, thread_ts=thread_ts, user=user)
        assert await self.event(event) == 200
        return ts

    async def start_waiting_run(self, command: str) -> str:
        """Mention with a command that starts a run, and wait until the run asks its question."""
        top = await self.mention(command)
        await self.wait_status(top, "Waiting for your reply")
        await self.settle()
        return top

    async def reply(
        self, thread_ts: str, text: str, *, channel: str = "C1", user: str = "U1", channel_type: str = "channel"
    ) -> str:
        ts = new_ts()
        self.slack.add_message(channel, text, user=user, ts=ts, thread_ts=thread_ts)
        event = message_event(text, channel=channel, ts=ts, thread_ts=thread_ts, user=user, channel_type=channel_type)
        assert await self.event(event) == 200
        return ts

    async def click(self, element: dict[str, Any], message: dict[str, Any], *, user: str = "U1", channel: str = "C1",
                    selected: str | None = None) -> int:
        """Click a button (or choose `selected` in a static select) found on a posted message."""
        payload = block_actions_payload(
            element["action_id"],
            element.get("value"),
            user=user,
            channel=channel,
            message_ts=message["ts"],
            thread_ts=message.get("thread_ts"),
            block_id=element.get("_block_id", "actions"),
            action_type=element["type"],
            message_text=str(message.get("text") or ""),
            message_blocks=message.get("blocks"),
        )
        if selected is not None:
            option = {"text": {"type": "plain_text", "text": selected}, "value": selected}
            payload["actions"][0]["selected_option"] = option
        status, _ = await self.interaction(payload)
        return status

    async def submit_form(
        self, view: dict[str, Any], values: dict[str, Any], *, user: str = "U1"
    ) -> tuple[int, dict[str, Any] | None]:
        payload = view_submission_payload(view["callback_id"], view["private_metadata"], values, user=user)
        return await self.interaction(payload)

    # ---- what the user sees ---------------------------------------------------------

    def mark(self) -> int:
        return len(self.slack.calls)

    async def posted(
        self, predicate: Callable[[dict[str, Any]], bool], *, since: int = 0, timeout: float = WAIT
    ) -> dict[str, Any]:
        """A message the bot posted, or a reply it finished streaming."""
        return await self.slack.wait_for(("chat.postMessage", STREAMED), predicate, timeout=timeout, since=since)

    async def posted_text(self, needle: str, *, since: int = 0, timeout: float = WAIT) -> dict[str, Any]:
        return await self.posted(lambda p: needle in message_text(p), since=since, timeout=timeout)

    async def ephemeral(self, needle: str, *, since: int = 0, user: str | None = None) -> dict[str, Any]:
        return await self.slack.wait_for(
            "chat.postEphemeral",
            lambda p: needle in str(p.get("text")) and (user is None or p.get("user") == user),
            since=since,
            timeout=WAIT,
        )

    def thread(self, thread_ts: str, channel: str = "C1") -> list[dict[str, Any]]:
        """The bot's live messages in a thread (after in-place updates), oldest first."""
        found = [m for (ch, _), m in self.slack.messages.items()
                 if ch == channel and m.get("thread_ts") == thread_ts and m.get("bot_id")]
        return sorted(found, key=lambda m: float(m["ts"]))

    def button(
        self, thread_ts: str, label: str, *, channel: str = "C1", newest: bool = True
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """(element, message) of a button whose text contains `label` in the thread."""
        hits = [(e, m) for m in self.thread(thread_ts, channel) for e in elements(m) if label in element_text(e)]
        shown = [element_text(e) for m in self.thread(thread_ts, channel) for e in elements(m)]
        assert hits, f"no button {label!r}; buttons: {shown}"
        return hits[-1] if newest else hits[0]

    def status_message(self, thread_ts: str, channel: str = "C1") -> dict[str, Any]:
        hits = [m for m in self.thread(thread_ts, channel) if is_status(m)]
        assert hits, "no run status message in the thread"
        return hits[-1]

    async def wait_status(
        self, thread_ts: str, needle: str, *, timeout: float = WAIT, channel: str = "C1"
    ) -> dict[str, Any]:
        """Wait until the thread's status message (as updated in place) shows `needle`."""
        deadline = time.monotonic() + timeout
        since = 0
        while True:
            statuses = [m for m in self.thread(thread_ts, channel) if is_status(m)]
            hits = [m for m in statuses if needle in message_text(m)]
            if hits:
                return hits[-1]
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                texts = [message_text(m) for m in self.thread(thread_ts, channel) if is_status(m)]
                raise AssertionError(f"status never showed {needle!r}; status: {texts}")
            await self._next_message_call(len(self.slack.calls), remaining)

    async def _next_message_call(self, since: int, timeout: float) -> None:
        """Wait until the bot posts or edits any message (or `timeout` passes)."""
        waits = [asyncio.ensure_future(self.slack.wait_for(m, since=since, timeout=timeout))
                 for m in ("chat.update", "chat.postMessage")]
        done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

    async def settle(self) -> None:
        """Wait until the bot has no queued or running thread work."""
        assert self.bot is not None
        assert await self.bot.idle(WAIT), "bot work did not finish"
        if self.bot.home is not None:
            assert await self.bot.home.idle(WAIT), "home views were not published"


def hold_next_model_call(h: Harness) -> asyncio.Event:
    """The next model call waits until the returned event is set, then answers as the script would:
    a test can look at the thread while the call is certainly in flight, whatever the machine's load."""
    gate = asyncio.Event()
    respond = h.llm.responder
    assert respond is not None, "hold a call of a scripted responder"

    async def held(body: dict[str, Any]) -> Any:
        await gate.wait()
        return respond(body)

    h.llm.add_responder(held)
    return gate


def is_status(message: dict[str, Any]) -> bool:
    """The run's status message: its plan, or the drawn status where the plan is not available."""
    return any(b.get("type") == "plan" for b in message.get("blocks") or []) or "Progress:" in message_text(message)


def plan_tasks(message: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The status message's task cards by node id."""
    plans = [b for b in message.get("blocks") or [] if b.get("type") == "plan"]
    assert plans, "the status message has no plan"
    return {t["task_id"]: t for t in plans[0].get("tasks") or []}


def message_text(message: dict[str, Any]) -> str:
    """Everything readable in a message: text, section/context/markdown texts, plan and task titles, buttons."""
    parts = [str(message.get("text") or "")]
    for block in message.get("blocks") or []:
        text = block.get("text")
        if isinstance(text, dict):
            parts.append(str(text.get("text", "")))
        elif isinstance(text, str):  # a markdown block
            parts.append(text)
        if block.get("type") == "plan":
            parts.append(str(block.get("title", "")))
            parts += [str(t.get("title", "")) for t in block.get("tasks") or []]
        for element in block.get("elements") or []:
            if isinstance(element, dict) and isinstance(element.get("text"), (str, dict)):
                t = element["text"]
                parts.append(t if isinstance(t, str) else str(t.get("text", "")))
        accessory = block.get("accessory")
        if isinstance(accessory, dict):
            parts.append(element_text(accessory))
    return "\n".join(parts)


def artifact_paths(message: dict[str, Any]) -> list[str]:
    """The files a completion message lists, as full paths (folder heading + names)."""
    paths: list[str] = []
    for block in message.get("blocks") or []:
        text = str((block.get("text") or {}).get("text", "")) if block.get("type") == "section" else ""
        heading, _, names = text.partition("\n")
        if heading.startswith("*") and heading.endswith("/*"):
            folder = heading[1:-2]
            paths += [f"{folder}/{name}" for name in re.findall(r"`([^`]+)`", names)]
    return paths


def file_select(message: dict[str, Any]) -> dict[str, Any]:
    """The completion message's "post a file" menu."""
    return next(e for e in elements(message) if e["type"] == "static_select" and "artifact" in e["action_id"])


def file_option(message: dict[str, Any], path: str) -> str:
    """The value to choose in the completion message's file menu to post `path`."""
    return next(o["value"] for o in file_select(message)["options"] if o["text"]["text"] == path)


def elements(message: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for block in message.get("blocks") or []:
        if block.get("type") == "actions":
            out += [{**e, "_block_id": block.get("block_id", "actions")} for e in block.get("elements", [])]
        if isinstance(block.get("accessory"), dict):
            out.append({**block["accessory"], "_block_id": block.get("block_id", "section")})
    return out


def element_text(element: dict[str, Any]) -> str:
    text = element.get("text") or element.get("placeholder") or {}
    return str(text.get("text", "")) if isinstance(text, dict) else str(text)


async def close_bot(bot: CrewBot, grace: float = 2.0) -> None:
    """Stop a bot (in-flight turns get `grace` seconds); fails the test if shutting down hangs."""
    try:
        async with asyncio.timeout(grace + WAIT):
            await bot.close(grace=grace)
    except TimeoutError:
        raise AssertionError(f"the bot did not shut down within {grace + WAIT:.0f} s") from None


@asynccontextmanager
async def bot_harness(
    project: Path,
    packages: Sequence[str] = ("create-story-micro",),
    *,
    mode: Mode = "http",
    max_runs: int = 8,
    access: Access | None = None,
    llm: ScriptedLLM | None = None,
    configure: Callable[[BotConfig], None] | None = None,
    llm_retries: int = 0,
    llm_settings: dict[str, Any] | None = None,
    config_file: Path | None = None,
) -> AsyncIterator[Harness]:
    async with FakeSlack() as slack:
        own_llm = llm is None
        llm = llm or ScriptedLLM()
        if own_llm:
            await llm.start()
        config = make_config(slack, project, packages, mode=mode, max_runs=max_runs, access=access,
                             config_file=config_file)
        if configure is not None:
            configure(config)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as http:
            h = Harness(
                slack=slack, llm=llm, project=project, config=config, mode=mode, http=http, llm_retries=llm_retries,
                llm_settings=dict(llm_settings or {}),
            )
            try:
                await h.start()
                yield h
            finally:
                for bot in h.bots:
                    await close_bot(bot)
                if own_llm:
                    await llm.stop()
