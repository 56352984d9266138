"""The bot's Prometheus metrics, served as GET /metrics beside /healthz (`prometheus_client`'s text format).

Each bot has a registry of its own (tests start several bots in one process; replicas are scraped
one by one, each reporting its own). The numbers come from where things already pass:

- Slack requests through a Bolt middleware (events received, ack latency: with
  `process_before_response` the ack goes out when the listener returns);
- model calls through the model client's call watchers (tokens as the endpoint reported them, latency);
- the runs' audit events (run outcomes, command decisions and their latency);
- the work client's failed Web API calls; the outbox's waiting messages and the inbox's waiting events,
  read at scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from crewagent.core.api.runs import CallEnded, LLMReply

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MODEL_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, 160.0)
COMMAND_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
RUN_OUTCOMES = {"completed": "completed", "failed": "failed"}
InboxDepth = tuple[int, float | None]  # events waiting, and when the oldest of them was queued (epoch seconds)


class BotMetrics:
    def __init__(self) -> None:
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.events = Counter("crewagent_events_received", "Slack requests received (events, clicks, forms, "
                              "commands).", registry=registry)
        self.ack_seconds = Histogram("crewagent_ack_seconds", "Time from a Slack request's arrival to its ack.",
                                     buckets=LATENCY_BUCKETS, registry=registry)
        self.runs = Counter("crewagent_runs", "Runs that ended (completed, failed) or paused.", ["outcome"],
                            registry=registry)
        self.tokens = Counter("crewagent_model_tokens", "Model tokens as the endpoint reported them.",
                              ["direction"], registry=registry)
        self.model_seconds = Histogram("crewagent_model_call_seconds", "Model call latency (whole answer, "
                                       "retries included).", ["outcome"], buckets=MODEL_BUCKETS, registry=registry)
        self.slack_errors = Counter("crewagent_slack_api_errors", "Slack Web API calls that failed.", ["method"],
                                    registry=registry)
        self.outbox_pending = Gauge("crewagent_outbox_pending", "Slack messages and edits waiting in the outbox.",
                                    registry=registry)
        self.inbox_waiting = Gauge("crewagent_inbox_waiting", "Thread events acknowledged to Slack and not handled "
                                   "yet: in this process's inbox (local), or in the replicas' shared one "
                                   "(database).", ["inbox"], registry=registry)
        self.inbox_oldest = Gauge("crewagent_inbox_oldest_seconds", "How long the oldest thread event not handled "
                                  "yet has waited (0 when none waits), by inbox as crewagent_inbox_waiting.",
                                  ["inbox"], registry=registry)
        self._shared_inbox: Callable[[], Awaitable[InboxDepth | None]] | None = None
        self.command_decisions = Counter("crewagent_command_decisions", "Commands the agents asked to run, by "
                                         "decision.", ["decision"], registry=registry)
        self.command_seconds = Histogram("crewagent_command_seconds", "Run time of the commands that ran.",
                                         buckets=COMMAND_BUCKETS, registry=registry)
        for direction in ("input", "output"):
            self.tokens.labels(direction=direction)  # both series exist from the start, at 0

    def watch_outbox(self, waiting: Callable[[], int]) -> None:
        self.outbox_pending.set_function(lambda: float(waiting()))

    def watch_inbox(
        self, local: Callable[[], InboxDepth], shared: Callable[[], Awaitable[InboxDepth | None]] | None = None
    ) -> None:
        """`local`: the embedded inbox, or a replica's away-inbox (read at scrape time); `shared`: the replicas'
        inbox in the database, asked at each scrape (None: no answer in time, the last figures stay)."""
        self.inbox_waiting.labels(inbox="local").set_function(lambda: float(local()[0]))
        self.inbox_oldest.labels(inbox="local").set_function(lambda: _age(local()[1]))
        self._shared_inbox = shared

    # ---- where the numbers come from ------------------------------------------

    async def bolt_middleware(self, next: Callable[[], Awaitable[Any]]) -> Any:
        """A Bolt global middleware (`app.use`): counts the request and times it until the ack."""
        self.events.inc()
        started = time.perf_counter()
        try:
            return await next()
        finally:
            self.ack_seconds.observe(time.perf_counter() - started)

    def model_call(self, model: str) -> CallEnded:
        """A model client CallWatcher."""
        started = time.perf_counter()

        def ended(reply: LLMReply | None, error: BaseException | None) -> None:
            self.model_seconds.labels(outcome="ok" if reply is not None else "error").observe(
                time.perf_counter() - started
            )
            usage = reply.usage if reply is not None else None
            if usage:
                self.tokens.labels(direction="input").inc(usage.get("prompt_tokens", 0))
                self.tokens.labels(direction="output").inc(usage.get("completion_tokens", 0))

        return ended

    def audited(self, run_id: str, event: dict[str, Any]) -> None:
        """A run store audit listener."""
        kind = event.get("kind")
        if kind == "run.phase":
            outcome = RUN_OUTCOMES.get(str(event.get("to")))
            if outcome is None and event.get("paused"):
                outcome = "paused"
            if outcome is not None:
                self.runs.labels(outcome=outcome).inc()
        elif kind == "command.run":
            self.command_decisions.labels(decision=command_decision(event)).inc()
            if event.get("durationMs") is not None:
                self.command_seconds.observe(float(event["durationMs"]) / 1000)

    def slack_call(self, method: str) -> Callable[[BaseException | None], None]:
        """A Slack client call watcher: counts the calls that failed, by method."""

        def ended(error: BaseException | None) -> None:
            if error is not None:
                self.slack_errors.labels(method=method).inc()

        return ended

    # ---- the endpoint ------------------------------------------------------------

    async def serve(self, request: web.Request) -> web.Response:
        if self._shared_inbox is not None and (depth := await self._shared_inbox()) is not None:
            self.inbox_waiting.labels(inbox="database").set(depth[0])
            self.inbox_oldest.labels(inbox="database").set(_age(depth[1]))
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


def _age(queued_at: float | None) -> float:
    return max(0.0, time.time() - queued_at) if queued_at is not None else 0.0


def command_decision(event: dict[str, Any]) -> str:
    """`allowed` (the policy let it run), `approved` (it ran after the owner approved), `denied` (the owner said
    no), `refused` (the policy or the sandbox would not run it)."""
    if event.get("deniedBy") is not None or event.get("refused") == "COMMAND_DENIED":
        return "denied"
    if event.get("refused"):
        return "refused"
    return "approved" if event.get("approvedBy") else "allowed"
