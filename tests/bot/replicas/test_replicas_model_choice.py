"""A thread's `*model` choice across replicas: switched through one replica, kept in the shared
database, and used by whichever replica takes the thread over after its holder died."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.bot_harness import message_text
from tests.support.processes import kill_group
from tests.support.replica_cluster import cluster
from tests.support.scripts import HELLO_LINEAR_ANSWER, hello_linear_responder

pytestmark = pytest.mark.slow  # two serve processes on a real Postgres, one killed

MODELS = "models: {default: scripted, allowed: [scripted, scripted-large]}\n"


async def test_the_model_a_thread_chose_is_used_by_the_replica_that_takes_it_over(
    database_url: str, project: Path, tmp_path: Path
) -> None:
    async with cluster(database_url, project, tmp_path, mode="http", package="multi-workflows", extra_config=MODELS) as c:
        c.llm.responder = hello_linear_responder()
        top = await c.mention("hello-linear", via=0)
        await c.posted(lambda p: p.get("thread_ts") == top and "What is the topic?" in message_text(p))
        await c.reply(top, "*model scripted-large", via=1)
        await c.posted(lambda p: p.get("thread_ts") == top and "Switched to the model" in message_text(p))

        holder = await c.holder(top)
        victim = next((r for r in c.replicas if r.id == holder), c.replicas[0])
        survivor = next(r for r in c.replicas if r is not victim)
        kill_group(victim.process.pid)
        await victim.process.wait()
        asked = len(c.llm.requests)
        await c.reply(top, HELLO_LINEAR_ANSWER, via=survivor.index)
        await c.posted(lambda p: p.get("thread_ts") == top and "completed." in message_text(p))
        assert len(c.llm.requests) > asked
        assert {body["model"] for body in c.llm.requests[asked:]} == {"scripted-large"}
