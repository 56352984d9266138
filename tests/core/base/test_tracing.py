"""Traces: with an exporter (an OTLP endpoint in production, an in-memory one here) model calls, tool calls and
Slack calls become OpenTelemetry spans with the GenAI semantic conventions' attributes; without an endpoint,
nothing of OpenTelemetry is imported."""

from __future__ import annotations

import subprocess
import sys

import pytest

from crewagent.bot.slack_client import PacedWebClient
from crewagent.core.api.runs import LLMClient, LLMSettings, attributed, tracing_from_env
from tests.support.fakes import BOT_TOKEN, FakeSlack, ScriptedLLM
from tests.support.paths import REPO


def test_without_an_endpoint_nothing_of_opentelemetry_is_imported() -> None:
    probe = (
        "import sys; from core.api.runs import tracing_from_env; import bot.serve.app; "
        "assert tracing_from_env({}) is None; "
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')], sorted(sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


async def test_model_tool_and_slack_calls_become_spans_with_the_genai_attributes() -> None:
    memory = pytest.importorskip(
        "opentelemetry.sdk.trace.export.in_memory_span_exporter",
        reason="the OpenTelemetry SDK is not installed (pip install '.[traces]')",
    )
    exporter = memory.InMemorySpanExporter()
    tracing = tracing_from_env({}, exporter=exporter)
    assert tracing is not None
    llm = ScriptedLLM()
    await llm.start()
    client = LLMClient(LLMSettings(model="scripted", base_url=llm.base_url, api_key="test", max_retries=0))
    client.watchers.append(tracing.model_call)
    try:
        llm.add_reply("Hello.", usage={"prompt_tokens": 31, "completion_tokens": 7, "total_tokens": 38})
        with attributed(run_id="run-1"):
            await client.complete([{"role": "user", "content": "hi"}])
    finally:
        await client.aclose()
        await llm.stop()
    tracing.audited("run-1", {"kind": "tool.exec", "toolName": "fs_read", "toolCallId": "call-1", "durationMs": 12.5,
                              "output": {"ok": False, "error": {"code": "E_NOT_FOUND", "message": "no such file"}}})
    async with FakeSlack() as slack:
        web = PacedWebClient(token=BOT_TOKEN, base_url=slack.api_url)
        web.call_watchers.append(tracing.slack_call)
        await web.chat_postMessage(channel="C1", text="hello")

    chat, tool, send = exporter.get_finished_spans()
    assert chat.name == "chat scripted" and dict(chat.attributes) == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "scripted",
        "crewagent.run_id": "run-1", "gen_ai.usage.input_tokens": 31, "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ("stop",),
    }
    assert tool.name == "execute_tool fs_read" and tool.attributes["gen_ai.tool.call.id"] == "call-1"
    assert tool.attributes["error.type"] == "E_NOT_FOUND" and tool.end_time - tool.start_time == 12_500_000
    assert send.name == "slack chat.postMessage" and "error.type" not in send.attributes
