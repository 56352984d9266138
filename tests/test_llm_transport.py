"""The model client over the SDK's aiohttp transport: failures keep their meaning, retries stay visible."""

from __future__ import annotations

import asyncio
import socket

import pytest

from core.errors import CrewError
from core.llm import LLMClient, LLMSettings
from tests.fakes.llm_server import ScriptedLLM

MESSAGES = [{"role": "user", "content": "hi"}]


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_refused_connection_is_a_connection_error_not_a_timeout() -> None:
    client = LLMClient(LLMSettings(model="m", base_url=f"http://127.0.0.1:{_closed_port()}/v1", max_retries=1))
    try:
        with pytest.raises(CrewError) as err:
            await asyncio.wait_for(client.complete(MESSAGES), 10)
    finally:
        await client.aclose()
    assert err.value.code == "LLM_HTTP_ERROR"
    assert "Could not connect" in err.value.message and "2 attempts" in err.value.message


async def test_retries_are_reported_and_many_calls_share_the_pool() -> None:
    async with ScriptedLLM(default_reply="ok") as llm:
        llm.add_error(503)
        llm.add_reply(content="recovered")
        client = LLMClient(LLMSettings(model="m", base_url=llm.base_url, max_retries=2, max_connections=4))
        seen: list[tuple[int, str]] = []
        try:
            reply = await client.complete(MESSAGES, on_retry=lambda attempt, why: seen.append((attempt, why)))
            assert reply.content == "recovered" and seen == [(1, "HTTP 503")]
            llm.latency = 0.05
            replies = await asyncio.gather(*(client.complete(MESSAGES) for _ in range(12)))
        finally:
            await client.aclose()
    assert len(replies) == 12 and len(llm.requests) == 14  # 12 calls through 4 connections, none lost
