"""The model client over the SDK's aiohttp transport: failures keep their meaning, retries stay visible."""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import pytest

from crewagent.core.base.errors import CrewError
from crewagent.core.model.client import LLMClient, LLMSettings
from crewagent.core.model.wire import MessageJSON, ToolSet
from tests.support.fakes.llm_server import ScriptedLLM

MESSAGES = [{"role": "user", "content": "hi"}]
STREAMED = {"stream": True, "stream_options": {"include_usage": True}}


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def test_a_refused_connection_is_a_connection_error_not_a_timeout(caplog: pytest.LogCaptureFixture) -> None:
    port = _closed_port()
    client = LLMClient(LLMSettings(model="m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1))
    try:
        with pytest.raises(CrewError) as err:
            await asyncio.wait_for(client.complete(MESSAGES), 30)
    finally:
        await client.aclose()
    assert err.value.code == "LLM_HTTP_ERROR"
    assert "could not be reached" in err.value.message and "2 attempts" in err.value.message
    for operator_detail in ("127.0.0.1", str(port), "OPENAI_BASE_URL"):
        assert operator_detail not in err.value.message  # users see what happened, not how it is set up
    logged = [r for r in caplog.records if r.name == "crewagent.core.model.client"]
    assert logged and f"127.0.0.1:{port}" in logged[-1].getMessage() and "OPENAI_BASE_URL" in logged[-1].getMessage()


def test_timeout_and_retries_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert (LLMSettings().timeout, LLMSettings().max_retries) == (60.0, 2)  # bounded by default
    monkeypatch.setenv("CREWAGENT_LLM_TIMEOUT", "7.5")
    monkeypatch.setenv("CREWAGENT_LLM_RETRIES", "0")
    settings = LLMSettings.from_env(model="m")
    assert (settings.timeout, settings.max_retries, settings.attempts) == (7.5, 0, 1)
    assert LLMSettings.from_env(timeout=20).timeout == 20  # an explicit setting (crewagent.yml) wins
    monkeypatch.setenv("CREWAGENT_LLM_TIMEOUT", "soon")
    with pytest.raises(CrewError) as err:
        LLMSettings.from_env()
    assert err.value.code == "LLM_SETTINGS_INVALID" and "CREWAGENT_LLM_TIMEOUT" in err.value.message


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


async def test_an_answer_missing_optional_fields_is_still_read() -> None:
    """OpenAI-compatible servers often omit `id`, `created`, `object` or send a null finish_reason."""
    sparse = {"choices": [{"message": {"role": "assistant", "content": "hello"}, "finish_reason": None}]}
    async with ScriptedLLM() as llm:
        llm.add_error(200, body=sparse)
        llm.add_error(200, body=b"not json at all")
        client = LLMClient(LLMSettings(model="m", base_url=llm.base_url, max_retries=0))
        try:
            reply = await client.complete(MESSAGES)
            with pytest.raises(CrewError) as err:
                await client.complete(MESSAGES)
        finally:
            await client.aclose()
    assert reply.content == "hello" and reply.tool_calls == [] and reply.usage is None
    assert err.value.code == "LLM_BAD_RESPONSE"


async def test_a_tool_set_sends_the_same_body_as_its_specs() -> None:
    function = {"name": "fs_read", "description": "read ✓", "parameters": {"type": "object", "minimum": 1}}
    specs = [{"type": "function", "function": function}]
    async with ScriptedLLM(default_reply="ok") as llm:
        client = LLMClient(LLMSettings(model="m", base_url=llm.base_url))
        try:
            await client.complete(MESSAGES, specs)
            await client.complete(MESSAGES, ToolSet.of(specs))
            await client.complete(MESSAGES, ToolSet.of([]))
        finally:
            await client.aclose()
    with_tools = {"model": "m", "messages": MESSAGES, "tools": specs, "tool_choice": "auto", **STREAMED}
    assert llm.requests == [with_tools, with_tools, {"model": "m", "messages": MESSAGES, **STREAMED}]
    assert ToolSet.of(specs).names == ("fs_read",)


def test_remembered_message_json_follows_the_message_content() -> None:
    known = MessageJSON()
    message: dict[str, Any] = {"role": "user", "content": "a"}
    assert [json.loads(t) for t in known.encode_all([message])] == [message]
    message["content"] = "b"  # changed in place: the old JSON must not come back
    assert [json.loads(t) for t in known.encode_all([message])] == [{"role": "user", "content": "b"}]
    odd = [{"role": "user", "content": content} for content in (1, True, None, ["x"], "1")]
    assert [json.loads(t) for t in known.encode_all(odd)] == odd  # never confused with each other


def test_remembered_message_json_keeps_what_the_last_request_sent() -> None:
    known = MessageJSON()
    history = [{"role": "user", "content": str(n)} for n in range(100)]
    for end in range(1, 101):  # a conversation growing by one message per call
        assert [json.loads(t) for t in known.encode_all(history[:end])] == history[:end]
    assert len(known) <= 100 + MessageJSON.SPARE
    known.encode_all(history[-3:])  # a shorter request: the rest is forgotten
    assert len(known) <= 3 + MessageJSON.SPARE


async def test_a_streamed_answer_reaches_the_listener_piece_by_piece_and_assembles_tool_calls() -> None:
    text = "Here is the plan for story 1-2, in three parts."
    async with ScriptedLLM(piece_chars=5) as llm:
        llm.add_reply(content=text, tool_calls=[("fs_read", {"path": "@project/a.md"}), ("fs_list", "{not json")])
        client = LLMClient(LLMSettings(model="m", base_url=llm.base_url))
        pieces: list[str] = []
        try:
            reply = await client.complete(MESSAGES, on_delta=pieces.append)
        finally:
            await client.aclose()
    assert len(pieces) == 10 and "".join(pieces) == text == reply.content
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("fs_read", '{"path": "@project/a.md"}'),
        ("fs_list", "{not json"),  # malformed arguments arrive as sent; the tool layer answers them
    ]
    assert reply.finish_reason == "tool_calls" and reply.usage and reply.usage["total_tokens"] > 0
