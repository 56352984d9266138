"""Log records on stderr: readable lines by default, one JSON object per line on request.

Slack and API secrets are scrubbed in both formats before anything is written. Tracebacks are
written only for real crashes (an unexpected exception our own code logs at ERROR) or when the
level is DEBUG; otherwise a record carrying an exception gets its one-line summary, so a network
failure retried every few seconds stays one line per attempt.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from datetime import datetime, timezone
from typing import Any, Literal, TextIO

from crewagent.core.api.checkout import scrub as scrub_url_credentials

LogFormat = Literal["text", "json"]
FORMATS: tuple[LogFormat, ...] = ("text", "json")
FORMAT_ENV = "CREWAGENT_LOG_FORMAT"

# Slack tokens (xoxb-, xoxp-, xoxa-, xoxe-, xapp-) and OpenAI-style keys.
_SECRET = re.compile(r"\b(?:xox[a-z]-[A-Za-z0-9-]+|xapp-[A-Za-z0-9-]+|sk-[A-Za-z0-9_-]{8,})")
_STANDARD_ATTRS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
# Loggers whose logged exceptions are expected failures (the SDKs log a retried connection error
# with its traceback); their tracebacks are shown at DEBUG only.
_SDK_LOGGERS = ("slack_sdk", "slack_bolt", "aiohttp", "openai", "httpx", "httpcore", "crewagent.socket_mode")
# Where a crash's traceback is worth its lines: our own code's unexpected exceptions.
_OWN_LOGGERS = ("bot", "core", "cli", "crewagent")


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


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def shows_traceback(record: logging.LogRecord, crashes: bool = True) -> bool:
    """Anything at DEBUG level; else, with `crashes`, a real crash (our code at ERROR, not an SDK's retry)."""
    if logging.getLogger().isEnabledFor(logging.DEBUG):
        return True
    if not crashes or _under(record.name, _SDK_LOGGERS):
        return False
    return record.levelno >= logging.ERROR and _under(record.name, _OWN_LOGGERS)


def _exception_summary(record: logging.LogRecord) -> str | None:
    if not record.exc_info or record.exc_info[1] is None:
        return None
    exc = record.exc_info[1]
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def _extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, `extra=` fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_extra_fields(record))
        if record.exc_info:
            if shows_traceback(record):
                entry["exc"] = self.formatException(record.exc_info)
            else:
                entry["error"] = _exception_summary(record)
        return json.dumps(_scrub(entry), ensure_ascii=False, default=str)


def _field_value(value: Any) -> str:
    """A word as it is; text with spaces or quotes in quotes; anything else as compact JSON."""
    if isinstance(value, str):
        plain = value and not any(c.isspace() or c in '"=' for c in value)
        return value if plain else json.dumps(value, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))


class TextFormatter(logging.Formatter):
    """`2026-11-26 07:20:01 WARNING crewagent.serve: message  key=value …` (UTC); a crash's traceback below it."""

    def __init__(self, *, crash_tracebacks: bool = True) -> None:
        super().__init__()
        self.crash_tracebacks = crash_tracebacks

    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        message = " ⏎ ".join(record.getMessage().splitlines())
        line = f"{when} {record.levelname:<7} {record.name}: {message}"
        fields = _extra_fields(record)
        traceback = None
        if record.exc_info:
            if shows_traceback(record, self.crash_tracebacks):
                traceback = self.formatException(record.exc_info)
            else:
                fields["error"] = _exception_summary(record)
        if fields:
            line += "  " + " ".join(f"{k}={_field_value(v)}" for k, v in fields.items())
        if traceback:
            line += "\n" + traceback
        return redact(line)


class _Stamp(logging.Filter):
    """Adds fixed fields (the replica id) to every record."""

    def __init__(self, fields: dict[str, Any]) -> None:
        super().__init__()
        self.fields = fields

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in self.fields.items():
            setattr(record, key, value)
        return True


def resolve_format(chosen: str | None, env: dict[str, str] | None = None) -> LogFormat:
    """The --log-format value, else CREWAGENT_LOG_FORMAT, else text. Raises ValueError for anything else."""
    value = (chosen or (os.environ if env is None else env).get(FORMAT_ENV) or "text").strip().lower()
    if value not in FORMATS:
        raise ValueError(f"{FORMAT_ENV}: {value!r} is not a log format; use one of: {', '.join(FORMATS)}")
    return "json" if value == "json" else "text"


def setup_logging(
    level: str | int = "INFO",
    *,
    log_format: LogFormat = "text",
    fields: dict[str, Any] | None = None,
    stream: TextIO | None = None,
    crash_tracebacks: bool = True,
) -> None:
    """Route every logger (ours, Bolt's, slack_sdk's, aiohttp's) through one handler on stderr."""
    handler = logging.StreamHandler(stream or sys.stderr)
    text = TextFormatter(crash_tracebacks=crash_tracebacks)
    handler.setFormatter(JsonFormatter() if log_format == "json" else text)
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
    logging.getLogger("httpx2").setLevel(max(logging.WARNING, root.level))
    # The Socket Mode client notes every session it opens and abandons; we log "connected" ourselves.
    logging.getLogger("crewagent.socket_mode").setLevel(logging.INFO if root.level <= logging.DEBUG else logging.WARNING)


def setup_terminal_logging(verbose: bool = False) -> None:
    """For `run` and `chat`: the person at the terminal reads our own messages, not the log.

    Only errors reach stderr, one line each; model-call warnings with hosts and ports stay out,
    since the user-facing message already says what went wrong. `--verbose` shows everything from
    DEBUG up, tracebacks included.
    """
    setup_logging(logging.DEBUG if verbose else logging.ERROR, crash_tracebacks=verbose)
