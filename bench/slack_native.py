"""Streamed replies in Slack: how soon the model's words appear, and what a run costs in Slack API calls.

Runs create-story-micro N times, one after another, through the real bot (HTTP mode, production
pacing) against FakeSlack and ScriptedLLM on loopback, with a model that writes `--speed` characters
per second. For each reply with text it measures the time from the model's first token to the
first Slack call carrying that reply's text (chat.startStream with the first piece when replies
stream; chat.postMessage of the whole reply when they do not), and for each run the Web API calls
made, by method. The same file runs against a checkout without streaming (the figures "before"):

    python bench/slack_native.py [--runs 20] [--speed 200]
    git archive <old-commit> | tar -x -C /tmp/old && cp bench/slack_native.py /tmp/old/bench/ \\
        && python /tmp/old/bench/slack_native.py
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

from crewagent.bot.config import Limits  # noqa: E402
from tests.support.fakes.llm_server import Reply, ScriptedLLM  # noqa: E402
from tests.support.fakes.slack_api import FakeSlack  # noqa: E402
from tests.support.scripts import STORY_KEY, create_story_responder  # noqa: E402
from tests.support.bot_harness import Harness, make_config  # noqa: E402

PIECE_CHARS = 12
NOT_API_CALLS = {"auth.test", "streamed", "upload", "response_url"}
TEXT_CALLS = {"chat.startStream", "chat.appendStream", "chat.postMessage"}


class TimedSlack(FakeSlack):
    """FakeSlack that also notes when each call arrived."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    async def _record(self, call: Any, request: Any = None) -> None:
        self.times.append(time.monotonic())
        await super()._record(call, request)


class Model:
    """create-story's competent model, writing at `speed` characters per second."""

    def __init__(self, speed: float, streams: bool) -> None:
        self.speed, self.streams = speed, streams
        self.inner = create_story_responder(STORY_KEY)
        self.first_tokens: list[tuple[float, str]] = []  # (when the reply's first token existed, its text)

    async def __call__(self, body: dict[str, Any]) -> Reply:
        reply = self.inner(body)
        text = (reply.content or "").strip()
        if not self.streams:
            if text:
                self.first_tokens.append((time.monotonic(), text))
            await asyncio.sleep(len(reply.content or "") / self.speed)  # the whole answer, then one body
        return reply


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def bench(runs: int, speed: float) -> None:
    home = Path(tempfile.mkdtemp(prefix="bench-native-"))
    os.environ["CREWAGENT_HOME"] = str(home / "home")
    project = home / "project"
    shutil.copytree(REPO / "examples" / "sample-project", project)
    llm = ScriptedLLM()
    streams = hasattr(llm, "piece_interval")
    if streams:
        llm.piece_chars, llm.piece_interval = PIECE_CHARS, PIECE_CHARS / speed
    model = Model(speed, streams)
    llm.responder = model
    per_run: list[Counter[str]] = []
    try:
        async with TimedSlack() as slack, llm, aiohttp.ClientSession() as http:
            config = make_config(slack, project, ["create-story-micro"])
            config.limits = Limits()  # production pacing, not the tests'
            h = Harness(slack=slack, llm=llm, project=project, config=config, mode="http", http=http)
            await h.start()
            try:
                for _ in range(runs):
                    mark = h.mark()
                    top = await h.mention("create-story")
                    await h.posted_text("1-2-user-authentication", since=mark, timeout=60)
                    await h.settle()
                    await h.reply(top, STORY_KEY)
                    await h.posted_text("completed.", since=mark, timeout=60)
                    await h.settle()
                    per_run.append(Counter(m for m, _ in slack.calls[mark:] if m not in NOT_API_CALLS))
            finally:
                await h.bot.close(grace=2.0)
            firsts = llm.first_piece_at if streams else [t for t, _ in model.first_tokens]
            delays = first_visible(slack, firsts)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    mode = "streamed replies" if streams else "whole replies"
    print(f"{mode}: {runs} create-story-micro runs, model writing {speed:g} chars/s, loopback")
    ms = [d * 1000 for d in delays]
    print(
        f"  first token → first Slack call with the reply's text: p50 {percentile(ms, 0.5):.1f} ms, "
        f"p95 {percentile(ms, 0.95):.1f} ms ({len(ms)} replies)"
    )
    total = sum(per_run, Counter())
    print(f"  Slack API calls per completed run: {statistics.mean(sum(c.values()) for c in per_run):.1f}")
    for method, count in total.most_common():
        print(f"    {method:40s} {count / runs:6.1f}")


def first_visible(slack: TimedSlack, firsts: list[float]) -> list[float]:
    """For each first token, the delay to the next Slack call that carries text (in order, one each)."""
    text_times = [t for (m, p), t in zip(slack.calls, slack.times) if m in TEXT_CALLS and _carries_reply(m, p)]
    delays: list[float] = []
    i = 0
    for first in firsts:
        while i < len(text_times) and text_times[i] < first:
            i += 1
        if i < len(text_times):
            delays.append(text_times[i] - first)
            i += 1
    return delays


def _carries_reply(method: str, params: dict[str, Any]) -> bool:
    if method != "chat.postMessage":
        return method == "chat.startStream"
    return any(b.get("type") in ("markdown", "section") for b in params.get("blocks") or []) and not any(
        b.get("type") in ("plan", "actions", "context_actions") for b in params.get("blocks") or []
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--speed", type=float, default=200.0, help="characters the model writes per second")
    args = parser.parse_args()
    asyncio.run(bench(args.runs, args.speed))


if __name__ == "__main__":
    main()
