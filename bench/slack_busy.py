"""A busy workspace: how soon what people wait for is shown whole while many runs move at once.

N create-story-micro runs, each in a channel of its own, overlap in time (they start `--spread`
seconds apart in all, and each person answers the run's question `--think` seconds after it is
shown). The real bot runs in this process (HTTP mode, production pacing: `Limits()` defaults)
against FakeSlack, which notes when each call arrives, and ScriptedLLM, which writes each reply at
`--speed` characters per second after `--latency` seconds and notes when it finished writing.

Measured, per reply with text (the question and the closing note):
- shown whole: from the model finishing the reply to the first Slack call that carries all of it
  (chat.postMessage, chat.update of the posted first words, or chat.stopStream);
- reads complete: from the model finishing the closing note until the thread's plan shows the run
  Completed and its status line is cleared (what Slack shows from then on).
And whether the bot stayed inside Slack's limits: chat.update calls in the busiest minute (Tier 3,
about 50) and chat.postMessage calls in one channel in the busiest second.

    python -m bench.slack_busy [--runs 3 20] [--streaming refused allowed] [--speed 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

from crewagent.bot.config import Limits  # noqa: E402
from tests.support.fakes.llm_server import Reply, ScriptedLLM  # noqa: E402
from tests.support.fakes.slack_api import STREAMED  # noqa: E402
from tests.support.scripts import create_story_responder  # noqa: E402
from tests.support.bot_harness import Harness, is_status, make_config, message_text  # noqa: E402
from bench.slack_native import TimedSlack, percentile  # noqa: E402

TAG = re.compile(r"bench-run-(\d+)")
QUESTION_END = "for example"
CLOSING_END = "then run dev-story."
TEXT_CALLS = ("chat.postMessage", "chat.update", STREAMED)


@dataclass
class Finished:
    """A reply the model finished writing: when, in which run, what."""

    at: float
    run: int
    text: str


@dataclass
class Outcome:
    shown_whole: list[float] = field(default_factory=list)
    reads_complete: list[float] = field(default_factory=list)
    updates_busiest_minute: int = 0
    posts_busiest_channel_second: int = 0
    calls: dict[str, int] = field(default_factory=dict)
    missing: int = 0


class NotingLLM(ScriptedLLM):
    """ScriptedLLM that notes when each text reply was written to its end, and for which run.

    A request names its run through the marker file of the run's project (listed by the first step)
    or the story key the person gave. The closing note's request names nothing (a completed run's
    prompt holds no state), so it is given to the run that finished its last step first among those
    still waiting for theirs: the bot asks for the closing note as soon as it has the last step's answer.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.finished: list[Finished] = []
        self.closing_due: list[int] = []  # runs whose last step is done, oldest first

    async def _send_chunks(self, send: Any, response: Any, head: Any, completion: Any, body: dict[str, Any]) -> None:
        message = completion["choices"][0]["message"]
        text = (message.get("content") or "").strip()
        tagged = TAG.search(json.dumps(body))
        run = int(tagged.group(1)) if tagged else None
        if run is not None and "workflowStatus" in json.dumps(message.get("tool_calls")):
            self.closing_due.append(run)
        elif run is None and text and not message.get("tool_calls") and self.closing_due:
            run = self.closing_due.pop(0)

        async def noting_send(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
            if finish is not None and text and not message.get("tool_calls") and run is not None:
                self.finished.append(Finished(time.monotonic(), run, text))
            await send(delta, finish, **extra)

        await super()._send_chunks(noting_send, response, head, completion, body)


def responder(body: dict[str, Any]) -> Reply:
    return create_story_responder(_story_key(body))(body)


def _story_key(body: dict[str, Any]) -> str:
    tagged = TAG.search(json.dumps(body))
    return f"1-2-bench-run-{tagged.group(1)}" if tagged else "1-2-user-authentication"


def _normal(text: str) -> str:
    return " ".join(text.split())


async def one_run(h: Harness, run: int, start: float, think: float) -> None:
    await asyncio.sleep(start)
    channel = f"C{run}"
    top = await h.mention("create-story", channel=channel, user=f"U{run}")
    await _shown(h, channel, QUESTION_END)
    await asyncio.sleep(think)
    await h.reply(top, f"1-2-bench-run-{run}", channel=channel, user=f"U{run}")
    await _shown(h, channel, CLOSING_END)


async def _shown(h: Harness, channel: str, needle: str) -> None:
    await h.slack.wait_for(TEXT_CALLS, lambda p: p.get("channel") == channel and needle in message_text(p), timeout=300)


async def bench(runs: int, streaming: bool, args: argparse.Namespace) -> Outcome:
    home = Path(tempfile.mkdtemp(prefix="bench-busy-"))
    os.environ["CREWAGENT_HOME"] = str(home / "home")
    llm = NotingLLM(latency=args.latency, piece_chars=12, piece_interval=12 / args.speed)
    llm.responder = responder
    rng = random.Random(runs)
    try:
        async with TimedSlack() as slack, llm, aiohttp.ClientSession() as http:
            projects = []
            for run in range(runs):
                project = home / f"project-{run}"
                shutil.copytree(REPO / "examples" / "sample-project", project)
                (project / "artifacts" / f"bench-run-{run}.md").write_text("marks the run\n", encoding="utf-8")
                projects.append(project)
            config = make_config(slack, projects[0], ["create-story-micro"], max_runs=runs)
            config.limits = Limits(max_concurrent_runs=runs)  # production pacing, not the tests'
            for run, project in enumerate(projects):
                config.channels[f"C{run}"] = config.default.model_copy(update={"project": project})
            if not streaming:
                slack.fail_next("chat.startStream", "not_allowed", times=10**6)
            h = Harness(slack=slack, llm=llm, project=projects[0], config=config, mode="http", http=http)
            await h.start()
            try:
                starts = sorted(rng.uniform(0, args.spread) for _ in range(runs))
                thinks = [rng.uniform(args.think / 2, args.think * 1.5) for _ in range(runs)]
                await asyncio.gather(*(one_run(h, run, starts[run], thinks[run]) for run in range(runs)))
                await h.settle()
            finally:
                assert h.bot is not None
                await h.bot.close(grace=2.0)
            return measure(slack, llm.finished, runs)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def measure(slack: TimedSlack, finished: list[Finished], runs: int) -> Outcome:
    timeline = list(zip(slack.times, slack.calls))
    out = Outcome()
    for reply in finished:
        channel, whole = f"C{reply.run}", _normal(reply.text)
        shown = next(
            (t for t, (m, p) in timeline
             if t >= reply.at and m in TEXT_CALLS and p.get("channel") == channel and whole in _normal(message_text(p))),
            None,
        )
        if shown is None:
            out.missing += 1
            continue
        out.shown_whole.append(shown - reply.at)
        if CLOSING_END in reply.text:
            out.reads_complete.append(_reads_complete(timeline, channel, reply.at) - reply.at)
    updates = [t for t, (m, _) in timeline if m == "chat.update"]
    out.updates_busiest_minute = max((sum(1 for u in updates if s <= u < s + 60) for s in updates), default=0)
    posts: dict[str, list[float]] = {}
    for t, (m, p) in timeline:
        if m == "chat.postMessage":
            posts.setdefault(str(p.get("channel")), []).append(t)
    out.posts_busiest_channel_second = max(
        (sum(1 for u in times if s <= u < s + 1) for times in posts.values() for s in times), default=0
    )
    for _, (m, _) in timeline:
        out.calls[m] = out.calls.get(m, 0) + 1
    return out


def _reads_complete(timeline: list[tuple[float, Any]], channel: str, closing: float) -> float:
    """When the thread's plan last became Completed and its status line last became clear, after `closing`."""
    plan_done = line_clear = closing
    done, clear = False, True
    for t, (m, p) in timeline:
        if p.get("channel") != channel and p.get("channel_id") != channel:
            continue
        if m in ("chat.postMessage", "chat.update") and is_status(p):
            now_done = "Completed" in message_text(p)
            if now_done and not done:
                plan_done = max(t, closing)
            done = now_done
        if m == "assistant.threads.setStatus":
            now_clear = not p.get("status")
            if now_clear and not clear:
                line_clear = max(t, closing)
            clear = now_clear
        elif m in ("chat.postMessage", "chat.startStream") and not clear:
            clear, line_clear = True, max(t, closing)  # a reply clears Slack's line
    if not done or not clear:
        return float("inf")
    return max(plan_done, line_clear)


def report(runs: int, streaming: bool, out: Outcome) -> None:
    mode = "streaming allowed" if streaming else "streaming refused (post + edit)"
    print(f"{runs} runs at once, {mode}:")
    shown = sorted(out.shown_whole)
    done = sorted(out.reads_complete)
    if shown:
        print(f"  reply shown whole after the model finished it: p50 {percentile(shown, 0.5):.2f} s, "
              f"p95 {percentile(shown, 0.95):.2f} s, max {shown[-1]:.2f} s ({len(shown)} replies"
              f"{f', {out.missing} never shown whole' if out.missing else ''})")
    if done:
        print(f"  thread reads complete after the closing note: p50 {percentile(done, 0.5):.2f} s, "
              f"p95 {percentile(done, 0.95):.2f} s, max {done[-1]:.2f} s ({len(done)} runs)")
    print(f"  chat.update in the busiest minute: {out.updates_busiest_minute} (Tier 3: about 50); "
          f"chat.postMessage in one channel's busiest second: {out.posts_busiest_channel_second}")
    calls = ", ".join(f"{m} {n / runs:.1f}" for m, n in sorted(out.calls.items(), key=lambda kv: -kv[1])
                      if not m.startswith(("auth.", "streamed", "conversations.", "users.")))
    print(f"  calls per run: {calls}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[3, 20])
    parser.add_argument("--streaming", nargs="+", choices=["refused", "allowed"], default=["refused", "allowed"])
    parser.add_argument("--speed", type=float, default=100.0, help="characters the model writes per second")
    parser.add_argument("--latency", type=float, default=0.3, help="seconds before the model's first token")
    parser.add_argument("--spread", type=float, default=20.0, help="seconds over which the runs start")
    parser.add_argument("--think", type=float, default=3.0, help="seconds a person takes to answer (on average)")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    started = time.process_time()
    for streaming in args.streaming:
        for runs in args.runs:
            report(runs, streaming == "allowed", asyncio.run(bench(runs, streaming == "allowed", args)))
    print(f"(load average {load:.1f} at start; {time.process_time() - started:.1f} s CPU in this process)")


if __name__ == "__main__":
    main()
