"""Streamed model calls against endpoints that refuse streaming options or lose the connection mid-answer.

Everything goes through the real openai SDK to the scripted server on loopback.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from crewagent.core.base.errors import CrewError
from crewagent.core.model.client import LLMClient, LLMSettings
from crewagent.core.model.completion_stream import CONNECTION_LOST
from tests.support.fakes.llm_server import ScriptedLLM

MESSAGES = [{"role": "user", "content": "hi"}]


class Heard:
    """What a delta listener heard: pieces, with "<restart>" where the answer so far was voided."""

    def __init__(self) -> None:
        self.items: list[str] = []

    async def __call__(self, text: str, *, restart: bool = False) -> None:
        self.items.append("<restart>" if restart else text)


@asynccontextmanager
async def client_for(llm: ScriptedLLM, **settings: object) -> AsyncIterator[LLMClient]:
    client = LLMClient(LLMSettings(model="m", base_url=llm.base_url, **settings))  # type: ignore[arg-type]
    try:
        yield client
    finally:
        await client.aclose()


def _streaming(body: dict[str, object]) -> tuple[bool, bool]:
    return body.get("stream") is True, "stream_options" in body


async def test_an_endpoint_refusing_stream_options_streams_without_them_from_then_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="crewagent.core.model.completion_stream")
    async with ScriptedLLM(rejects_stream_options=True, piece_chars=4) as llm:
        llm.add_reply("first answer")
        llm.add_reply("second answer")
        async with client_for(llm) as client:
            heard = Heard()
            first = await client.complete(MESSAGES, on_delta=heard)
            second = await client.complete(MESSAGES)
    assert [_streaming(b) for b in llm.requests] == [(True, True), (True, False), (True, False)]
    assert len(llm.rejected) == 1  # the second call went straight to what the endpoint accepts
    assert first.content == "first answer" and "".join(heard.items) == "first answer" and len(heard.items) == 3
    assert first.usage is None and second.usage is None  # no usage chunk: the engine estimates it
    assert second.content == "second answer"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "estimated" in warnings[0].getMessage()


@pytest.mark.parametrize("status", [400, 422])
async def test_an_endpoint_refusing_streaming_gets_plain_requests_with_their_usage(status: int) -> None:
    async with ScriptedLLM(rejects_stream=True, rejection_status=status) as llm:
        llm.add_reply("plain answer", usage={"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9})
        llm.add_reply("again")
        async with client_for(llm) as client:
            heard = Heard()
            reply = await client.complete(MESSAGES, on_delta=heard)
            again = await client.complete(MESSAGES)
    assert [_streaming(b) for b in llm.requests] == [(True, True), (True, False), (False, False), (False, False)]
    assert reply.content == "plain answer" and heard.items == []  # shown whole when the reply comes
    assert reply.usage == {"prompt_tokens": 7, "completion_tokens": 2, "total_tokens": 9}
    assert again.content == "again"


async def test_a_bad_request_about_something_else_is_reported_at_once_and_streaming_stays_on() -> None:
    async with ScriptedLLM() as llm:
        llm.add_error(400, "maximum context length exceeded")
        llm.add_reply("fits now")
        async with client_for(llm) as client:
            with pytest.raises(CrewError) as err:
                await client.complete(MESSAGES)
            reply = await client.complete(MESSAGES)
    assert err.value.code == "LLM_HTTP_ERROR" and "maximum context length exceeded" in err.value.message
    assert [_streaming(b) for b in llm.requests] == [(True, True), (True, True)]
    assert reply.content == "fits now" and reply.usage is not None


async def test_a_refusal_naming_streaming_that_no_step_down_cures_reports_the_last_answer() -> None:
    async with ScriptedLLM() as llm:
        llm.add_error(422, {"detail": [{"loc": ["body", "stream_options"], "msg": "Extra inputs are not permitted"}]})
        llm.add_error(400, "stream: not supported here")
        llm.add_error(400, "model 'm' is not loaded")
        llm.add_reply("loaded")
        async with client_for(llm) as client:
            with pytest.raises(CrewError) as err:
                await client.complete(MESSAGES)
            reply = await client.complete(MESSAGES)
    assert "model 'm' is not loaded" in err.value.message
    assert [_streaming(b) for b in llm.requests] == [(True, True), (True, False), (False, False), (True, True)]
    assert reply.content == "loaded"  # nothing was learnt from a call that got no answer


async def test_streaming_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREWAGENT_LLM_STREAM", "0")
    settings = LLMSettings.from_env(model="m")
    assert settings.stream is False
    monkeypatch.setenv("CREWAGENT_LLM_STREAM", "1")
    assert LLMSettings.from_env(model="m").stream is True
    monkeypatch.delenv("CREWAGENT_LLM_STREAM")
    assert LLMSettings.from_env(model="m").stream is True  # on by default
    async with ScriptedLLM() as llm:
        llm.add_reply("whole")
        async with client_for(llm, stream=False) as client:
            heard = Heard()
            reply = await client.complete(MESSAGES, on_delta=heard)
    assert [_streaming(b) for b in llm.requests] == [(False, False)]
    assert reply.content == "whole" and heard.items == [] and reply.usage is not None


async def test_a_connection_lost_before_any_text_is_retried_quietly() -> None:
    async with ScriptedLLM(piece_chars=5) as llm:
        llm.add_reply("never seen", drop_after=1)  # only the role chunk gets through
        llm.add_reply("hello there")
        async with client_for(llm, max_retries=2) as client:
            heard = Heard()
            retries: list[tuple[int, str]] = []
            reply = await client.complete(MESSAGES, on_delta=heard, on_retry=lambda n, why: retries.append((n, why)))
    assert reply.content == "hello there" and heard.items == ["hello", " ther", "e"]
    assert retries == [(1, CONNECTION_LOST)] and len(llm.requests) == 2
    assert reply.usage is not None  # the answer that made it carries its usage


async def test_a_connection_lost_after_text_voids_it_before_the_new_answer_streams() -> None:
    async with ScriptedLLM(piece_chars=4) as llm:
        llm.add_reply("first try that breaks", drop_after=3)  # role chunk + two pieces
        llm.add_reply("second try", tool_calls=[("fs_read", {"path": "a.md"})])
        async with client_for(llm, max_retries=1) as client:
            heard = Heard()
            reply = await client.complete(MESSAGES, on_delta=heard)
    assert heard.items == ["firs", "t tr", "<restart>", "seco", "nd t", "ry"]
    assert reply.content == "second try" and [c.name for c in reply.tool_calls] == ["fs_read"]
    assert reply.tool_calls[0].arguments == '{"path": "a.md"}'


async def test_a_connection_lost_on_every_attempt_fails_after_the_retries() -> None:
    async with ScriptedLLM(piece_chars=4) as llm:
        for _ in range(2):
            llm.add_reply("cut off each time", drop_after=2)
        async with client_for(llm, max_retries=1) as client:
            heard = Heard()
            with pytest.raises(CrewError) as err:
                await client.complete(MESSAGES, on_delta=heard)
    assert err.value.code == "LLM_HTTP_ERROR" and err.value.details == {"status": None}
    assert heard.items == ["cut ", "<restart>", "cut "] and len(llm.requests) == 2
    llm.assert_consumed()


def test_a_streaming_switch_that_is_neither_on_nor_off_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREWAGENT_LLM_STREAM", "sometimes")
    with pytest.raises(CrewError) as err:
        LLMSettings.from_env(model="m")
    assert err.value.code == "LLM_SETTINGS_INVALID" and "CREWAGENT_LLM_STREAM" in err.value.message


async def test_calls_refused_at_the_same_time_step_down_together_and_warn_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="crewagent.core.model.completion_stream")
    async with ScriptedLLM(rejects_stream=True, default_reply="ok") as llm:
        async with client_for(llm) as client:
            replies = await asyncio.gather(*(client.complete(MESSAGES) for _ in range(6)))
            await client.complete(MESSAGES)
    assert [r.content for r in replies] == ["ok"] * 6
    assert _streaming(llm.requests[-1]) == (False, False) and len(llm.rejected) == 12
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "refused streaming" in warnings[0]


async def test_a_streamed_answer_leaves_no_stream_reader_for_the_event_loop_to_close() -> None:
    """Each reader left unfinished at [DONE] would be closed by a task of the loop's own, per model turn."""
    import gc
    import sys

    hooks = sys.get_asyncgen_hooks()
    left: list[str] = []

    def finalizer(agen: object) -> None:
        left.append(getattr(agen, "__qualname__", "?"))
        if hooks.finalizer is not None:
            hooks.finalizer(agen)

    sys.set_asyncgen_hooks(firstiter=hooks.firstiter, finalizer=finalizer)
    try:
        async with ScriptedLLM(piece_chars=4) as llm:
            llm.add_reply("an answer in pieces")
            async with client_for(llm) as client:
                reply = await client.complete(MESSAGES, on_delta=Heard())
                gc.collect()
    finally:
        sys.set_asyncgen_hooks(*hooks)
    assert reply.content == "an answer in pieces"
    assert left == []
