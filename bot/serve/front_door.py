"""The HTTP front door: POST /slack/events, GET /healthz and GET /metrics on one aiohttp app, served on a TCP site."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

EVENTS_PATH = "/slack/events"
METRICS_PATH = "/metrics"  # Prometheus' text format (bot.metrics)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def events_app(events: Handler, health: Handler, metrics: Handler | None = None) -> web.Application:
    app = health_app(health, metrics)
    app.router.add_post(EVENTS_PATH, events)
    return app


def health_app(health: Handler, metrics: Handler | None = None) -> web.Application:
    """GET /healthz, and GET /metrics unless metrics are off (Socket Mode serves only these)."""
    app = web.Application()
    app.router.add_get("/healthz", health)
    if metrics is not None:
        app.router.add_get(METRICS_PATH, metrics)
    return app


async def serve_web(app: web.Application, site: Callable[[web.AppRunner], web.BaseSite]) -> web.AppRunner:
    """Start serving `app` on the site `site(runner)` (TCP or Unix socket); the runner stops it later."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    await site(runner).start()
    return runner


def numeric_timestamp(value: str) -> bool:
    """Slack sends whole seconds in ASCII digits. slack_sdk's SignatureVerifier (inside Bolt's
    verification) raises on other values (ValueError for text, OverflowError for huge numbers),
    which Bolt answers with a 500; refuse them as unverifiable instead."""
    return value.isascii() and value.isdigit() and len(value) <= 12
