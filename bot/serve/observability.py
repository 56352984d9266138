"""What an operator sees of a bot, hooked where calls already pass: each model call's usage booked in the
operator log, Prometheus metrics (`metrics: true`, the default) and OpenTelemetry traces (with
OTEL_EXPORTER_OTLP_ENDPOINT). Nothing here changes what the bot does."""

from __future__ import annotations

from crewagent.core.api.runs import LLMClient, UsageMeter, tracing_from_env
from crewagent.core.api.stores import RuntimeStore

from ..bolt_app import CrewBoltApp
from ..config import BotConfig
from ..metrics import BotMetrics
from ..slack_client import PacedWebClient


def observe(
    config: BotConfig, llm: LLMClient, store: RuntimeStore, bolt_app: CrewBoltApp, work_client: PacedWebClient
) -> BotMetrics | None:
    """Hook usage, metrics and traces to the model client, the runs' audit, Bolt and the Slack client; the
    metrics (None when turned off)."""
    llm.watchers.append(UsageMeter(store.operator_log))  # each call's tokens, per person and channel
    metrics = BotMetrics() if config.metrics else None
    if metrics is not None:
        llm.watchers.append(metrics.model_call)
        store.audit_listeners.append(metrics.audited)
        bolt_app.use(metrics.bolt_middleware)
        work_client.call_watchers.append(metrics.slack_call)
    tracing = tracing_from_env()
    if tracing is not None:
        llm.watchers.append(tracing.model_call)
        store.audit_listeners.append(tracing.audited)
        work_client.call_watchers.append(tracing.slack_call)
    return metrics
