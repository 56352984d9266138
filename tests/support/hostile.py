"""Shared by the hostile-input tests: a watchdog for calls that hold the process, and a check that
one hostile run leaves other threads served."""

from __future__ import annotations

import asyncio
import faulthandler
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakes import Reply
from tests.support.scripts import Body, Call, calls, hello_linear_responder, previous_calls, previous_results
from tests.support.bot_harness import bot_harness, message_text

WATCHDOG_SECONDS = 60.0

BOMB_LEVELS = 8
BOMB_YAML = "\n".join(
    [f'  l0: &l0 [{", ".join(["lol"] * 9)}]']
    + [f'  l{i}: &l{i} [{", ".join([f"*l{i - 1}"] * 9)}]' for i in range(1, BOMB_LEVELS + 1)]
)
"""The body of a `variables:` mapping whose last entry stands for 9**9 strings through aliases."""


@pytest.fixture
def watchdog() -> Iterator[None]:
    """Turn a call that holds the GIL for good (a backtracking regex, a YAML bomb) into a failure, not a hang.

    faulthandler's timer thread needs no GIL: past the bound it prints every thread's stack (showing
    where the process was stuck) and ends the test process with exit status 1.
    """
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


async def hostile_run_leaves_others_served(project: Path, hostile: Sequence[Call]) -> list[dict[str, Any]]:
    """Start hello-linear whose model first makes the `hostile` calls; return their results.

    While the hostile run is still in flight (its next model call is held), a mention in another
    channel must be acked and answered; then the hostile run goes on and asks its usual question.
    """
    results: asyncio.Future[list[dict[str, Any]]] = asyncio.get_running_loop().create_future()
    release = asyncio.Event()
    normal = hello_linear_responder()
    asked: list[Body] = []
    names = [name for name, _ in hostile]

    async def respond(body: Body) -> Reply:
        asked.append(body)
        if len(asked) == 1:
            return calls(*hostile)
        if [name for name, _ in previous_calls(body)] == names:
            if not results.done():
                results.set_result(previous_results(body))
            await release.wait()
        return normal(body)

    async with bot_harness(project, ["multi-workflows"]) as h:
        h.llm.responder = respond
        try:
            top = await h.mention("hello-linear")
            found = await asyncio.wait_for(results, 30)
            mark = h.mark()
            other = await h.mention("Mary", channel="C9")  # the HTTP front door acked it (200)
            await h.posted(lambda p: p.get("channel") == "C9" and p.get("thread_ts") == other, since=mark)
        finally:
            release.set()
        await h.posted(lambda p: "What is the topic?" in message_text(p) and p.get("thread_ts") == top)
    return found
