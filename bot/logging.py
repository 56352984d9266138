"""Structured JSON log lines on stderr, with Slack and API secrets scrubbed before they are written."""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import datetime, timezone
from typing import Any

from core.checkout.urls import scrub as scrub_url_credentials

# Slack tokens (xoxb-, xoxp-, xoxa-, xoxe-, xapp-) and OpenAI-style keys.
_SECRET = re.compile(r"\b(?:xox[a-z]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+|sk-[A-Za-z0-9_-]{8,})")
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}


def redact(text: str) -> str:
    """Replace anything shaped like a token with a marker that keeps its kind; drop credentials from URLs."""
    return scrub_url_credentials(_SECRET.sub(lambda m: m.group(0).split("-", 1)[0] + "-[redacted]", text))


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {str(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return redact(repr(value))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, `extra=` fields, exception text."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and not key.startswith("_"):
                entry[key] = value
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(_scrub(entry), ensure_ascii=False, default=str)


class _Stamp(logging.Filter):
    """Adds fixed fields (the replica id) to every record."""

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__()
        self.fields = fields

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in self.fields.items():
            setattr(record, key, value)
        return True


def setup_logging(level: str | int = "INFO", *, fields: dict[str, Any] | None = None) -> None:
    """Route every logger (ours, Bolt's, slack_sdk's, aiohttp's) through one JSON handler on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    if fields:
        handler.addFilter(_Stamp(fields))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # The SDKs log request bodies at DEBUG; keep them quieter than our own logs.
    for noisy in ("slack_sdk", "slack_bolt", "aiohttp.access", "openai", "httpx"):
        logging.getLogger(noisy).setLevel(max(logging.INFO, logging.getLogger().level))
    # One line per model request says nothing our own run logs don't, and costs CPU on every turn.
    logging.getLogger("httpx2").setLevel(max(logging.WARNING, logging.getLogger().level))
