"""OpenTelemetry spans for model calls, tool calls and Slack sends, when an OTLP endpoint is configured.

With `OTEL_EXPORTER_OTLP_ENDPOINT` set (the SDK's own variable; it also reads the other `OTEL_*`
settings: headers, protocol, `OTEL_SERVICE_NAME`), `tracing_from_env` loads the OpenTelemetry SDK
and its OTLP exporter (the `traces` extra) and returns a `Tracing`; without it, it returns None
and nothing of OpenTelemetry is imported. Spans follow the GenAI semantic conventions: a model call
is `chat {model}` with `gen_ai.operation.name`, `gen_ai.request.model` and the usage the endpoint
reported (`gen_ai.usage.input_tokens` / `output_tokens`); a tool call is `execute_tool {name}`.

The spans are made from what is already observed (the model client's call watchers, the runs' audit
events, the Slack client's calls), so no engine code waits on or knows about tracing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from .attribution import current

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
SERVICE_NAME = "crewagent"
PROVIDER = "openai"  # the wire protocol of every endpoint the model client talks to


class Tracing:
    def __init__(self, tracer: Tracer, kinds: Any) -> None:
        self.tracer = tracer
        self._kinds = kinds  # opentelemetry.trace.SpanKind, passed in so this module imports none of it

    def model_call(self, model: str) -> Callable[[Any, BaseException | None], None]:
        """A model client CallWatcher: one `chat` span per call."""
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": PROVIDER, "gen_ai.request.model": model,
        }
        run_id = current().run_id
        if run_id:
            attributes["crewagent.run_id"] = run_id
        span = self.tracer.start_span(f"chat {model}", kind=self._kinds.CLIENT, attributes=attributes)

        def ended(reply: Any, error: BaseException | None) -> None:
            if reply is not None:
                usage = reply.usage or {}
                if "prompt_tokens" in usage:
                    span.set_attribute("gen_ai.usage.input_tokens", usage["prompt_tokens"])
                if "completion_tokens" in usage:
                    span.set_attribute("gen_ai.usage.output_tokens", usage["completion_tokens"])
                if reply.finish_reason:
                    span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason])
            _end(span, error)

        return ended

    def audited(self, run_id: str, event: dict[str, Any]) -> None:
        """A run store audit listener: each tool call becomes an `execute_tool` span over the time it took."""
        if event.get("kind") != "tool.exec" or event.get("durationMs") is None:
            return
        name = str(event.get("toolName") or "")
        now = time.time_ns()
        attributes = {
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
            "gen_ai.tool.call.id": str(event.get("toolCallId") or ""), "crewagent.run_id": run_id,
        }
        span = self.tracer.start_span(f"execute_tool {name}", kind=self._kinds.INTERNAL, attributes=attributes,
                                      start_time=now - int(float(event["durationMs"]) * 1_000_000))
        output = event.get("output")
        if isinstance(output, dict) and output.get("ok") is False:
            error = output.get("error")
            code = error.get("code") if isinstance(error, dict) else None
            span.set_attribute("error.type", str(code or "tool_error"))
        span.end(end_time=now)

    def slack_call(self, method: str) -> Callable[[BaseException | None], None]:
        """A Slack client call watcher: one span per Web API call."""
        span = self.tracer.start_span(f"slack {method}", kind=self._kinds.CLIENT,
                                      attributes={"rpc.system": "slack", "rpc.method": method})
        return lambda error: _end(span, error)


def _end(span: Span, error: BaseException | None) -> None:
    if error is not None:
        span.set_attribute("error.type", type(error).__qualname__)
    span.end()


def tracing_from_env(env: Mapping[str, str] | None = None, exporter: SpanExporter | None = None) -> Tracing | None:
    """Tracing to the OTLP endpoint the environment names (or to `exporter`, spans sent one by one: tests);
    None when neither is given."""
    env = os.environ if env is None else env
    if exporter is None and not env.get(ENDPOINT_ENV, "").strip():
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
    from opentelemetry.trace import SpanKind

    provider = TracerProvider(resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME") or SERVICE_NAME}))
    if exporter is not None:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # sent off the loop, in batches
    return Tracing(provider.get_tracer("crewagent"), SpanKind)
