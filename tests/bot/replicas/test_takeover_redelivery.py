"""A thread reply whose replica dies while it is being answered, then delivered again by Slack after
another replica took the thread over: answered once, by the new holder, and the redelivery does nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.support.bot_harness import message_text
from tests.support.fakes import Reply
from tests.support.processes import kill_group
from tests.support.replica_cluster import WAIT, cluster
from tests.support.scripts import user_inputs

pytestmark = pytest.mark.slow  # two serve processes on a real Postgres, one killed mid-answer

QUESTION = "what is the plan?"


async def test_a_reply_redelivered_after_a_takeover_is_answered_once(
    database_url: str, project: Path, tmp_path: Path
) -> None:
    async with cluster(database_url, project, tmp_path, mode="http", package="multi-workflows") as c:
        asked, release = asyncio.Event(), asyncio.Event()
        answers = 0

        async def respond(body: dict[str, Any]) -> Reply:
            nonlocal answers
            inputs = user_inputs(body)
            if inputs and QUESTION in inputs[-1]:
                answers += 1
                if answers == 1:  # the first replica's call: it dies waiting for it
                    asked.set()
                    await release.wait()
            return Reply(content=f"answer to: {(inputs[-1] if inputs else 'hello').splitlines()[-1]}")

        c.llm.responder = respond
        top = await c.mention("Mary", via=0)
        await c.posted(lambda p: p.get("thread_ts") == top and "[1] Run the hello-linear workflow" in message_text(p))
        envelope = await c.reply(top, QUESTION, via=0)
        await asyncio.wait_for(asked.wait(), WAIT)
        holder = await c.holder(top)
        victim = next(r for r in c.replicas if r.id == holder)
        kill_group(victim.process.pid)
        await victim.process.wait()
        release.set()
        survivor = c.replicas.index(next(r for r in c.replicas if r is not victim))

        await c.posted(lambda p: p.get("thread_ts") == top and f"answer to: {QUESTION}" in message_text(p))
        await c.event({**envelope, "retry_attempt": 1}, via=survivor)  # Slack delivers it again
        since = len(c.slack.calls)
        await c.reply(top, "and then?", via=survivor)  # a later event: by the time it is answered, the retry was seen
        await c.posted(lambda p: p.get("thread_ts") == top and "answer to: and then?" in message_text(p), since=since)
        shown = [t for t in c.posts(top) if f"answer to: {QUESTION}" in t]
        assert len(shown) == 1, f"answered {len(shown)} times: {c.posts(top)}"
        assert answers == 2, "asked by the dead replica, then once by the one that took the thread over"
