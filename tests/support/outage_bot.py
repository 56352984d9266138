"""An in-process bot in HTTP mode over the fake Slack and the scripted model, for the outage tests.

Waits are on what the user would see (recorded Slack calls, messages Slack now holds), each bounded.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from crewagent.bot.config import BotConfig, load_config
from crewagent.bot.serve.app import CrewBot, build
from crewagent.core.model.client import LLMSettings
from tests.support.fakes import BOT_TOKEN, FakeSlack, ScriptedLLM
from tests.support.fakes.slack_events import app_mention_event, deliver_event, message_event, new_ts

SECRET = "test-signing-secret"
WAIT = 30.0
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def outage_config(
    slack: FakeSlack, project: Path, packages: Sequence[str], *, home: Path | None = None, database_url: str | None = None
) -> BotConfig:
    env = {
        "SLACK_BOT_TOKEN": BOT_TOKEN, "SLACK_API_URL": slack.api_url, "CREWAGENT_MODEL": "scripted",
        "SLACK_SIGNING_SECRET": SECRET,
    }
    if home is not None:
        env["CREWAGENT_HOME"] = str(home)
    if database_url is not None:
        env["CREWAGENT_DATABASE_URL"] = database_url
    config = load_config(project=project, packages=[EXAMPLES / p for p in packages], env=env)
    config.limits.status_update_interval = 0.05
    config.limits.status_edits_per_second = 200.0
    config.limits.stream_flush_interval = 0.0
    config.limits.status_line_interval = 0.0
    config.limits.status_lines_per_second = 200.0
    config.limits.shutdown_grace = 2.0
    return config


def text_of(message: dict[str, Any]) -> str:
    """Everything readable in a message: its text and every text inside its blocks."""
    found: list[str] = [str(message.get("text") or "")]

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key == "text" and isinstance(item, str):
                    found.append(item)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(message.get("blocks") or [])
    return "\n".join(found)


@dataclass
class OutageBot:
    slack: FakeSlack
    llm: ScriptedLLM
    config: BotConfig
    http: aiohttp.ClientSession
    bot: CrewBot | None = None
    url: str = ""
    bots: list[CrewBot] = field(default_factory=list)

    async def start(self) -> CrewBot:
        settings = LLMSettings(model="scripted", base_url=self.llm.base_url, max_retries=0, timeout=10)
        bot = build(self.config, llm_settings=settings)
        self.bots.append(bot)
        self.bot = bot
        async with asyncio.timeout(WAIT):
            port = await bot.start_http("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{port}/slack/events"
        return bot

    async def event(self, envelope: dict[str, Any], *, retry_num: int | None = None) -> int:
        status, _ = await deliver_event(self.http, self.url, SECRET, envelope, retry_num=retry_num)
        return status

    async def mention(self, text: str, *, channel: str = "C1", user: str = "U1") -> str:
        ts = new_ts()
        self.slack.add_message(channel, f"<@UBOT> {text}", user=user, ts=ts)
        assert await self.event(app_mention_event(f"<@UBOT> {text}", channel=channel, ts=ts, user=user)) == 200
        return ts

    async def reply(self, thread_ts: str, text: str, *, channel: str = "C1", user: str = "U1") -> int:
        ts = new_ts()
        self.slack.add_message(channel, text, user=user, ts=ts, thread_ts=thread_ts)
        return await self.event(message_event(text, channel=channel, ts=ts, thread_ts=thread_ts, user=user))

    def shown(self, thread_ts: str, needle: str, channel: str = "C1") -> list[dict[str, Any]]:
        """The bot's messages Slack holds in the thread that show `needle`."""
        return [
            m for (ch, _), m in self.slack.messages.items()
            if ch == channel and m.get("thread_ts") == thread_ts and m.get("bot_id") and needle in text_of(m)
        ]

    async def until_shown(self, thread_ts: str, needle: str, *, timeout: float = WAIT) -> float:
        """Wait until Slack holds a bot message in the thread showing `needle`; returns when (monotonic)."""
        deadline = time.monotonic() + timeout
        while not self.shown(thread_ts, needle):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"{needle!r} never shown in the thread")
            try:
                await self.slack.wait_for(
                    ("chat.postMessage", "chat.update", "chat.stopStream"), since=len(self.slack.calls),
                    timeout=remaining,
                )
            except AssertionError:
                pass
        return time.monotonic()

    async def settle(self) -> None:
        assert self.bot is not None
        assert await self.bot.idle(WAIT), "bot work did not finish"


@asynccontextmanager
async def outage_bot(
    project: Path,
    packages: Sequence[str] = ("multi-workflows",),
    *,
    responder: Callable[..., Any] | None = None,
    configure: Callable[[BotConfig], None] | None = None,
) -> AsyncIterator[OutageBot]:
    async with FakeSlack() as slack, ScriptedLLM() as llm:
        if responder is not None:
            llm.responder = responder
        config = outage_config(slack, project, packages)
        if configure is not None:
            configure(config)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=WAIT)) as http:
            harness = OutageBot(slack=slack, llm=llm, config=config, http=http)
            try:
                await harness.start()
                yield harness
            finally:
                for bot in harness.bots:
                    async with asyncio.timeout(WAIT):
                        await bot.close(grace=1.0)
