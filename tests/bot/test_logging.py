"""Log output an operator reads: text lines by default, JSON on request, tracebacks only where they help."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import sys
from pathlib import Path

import pytest

from crewagent.bot.logging import JsonFormatter, TextFormatter, resolve_format, setup_logging
from crewagent.cli.main import build_parser
from crewagent.cli.serve_cmd import run as serve_run
from tests.support.paths import EXAMPLES, REPO
from tests.support.fakes import APP_TOKEN, BOT_TOKEN
from tests.support.processes import Spawner


def _record(name: str, level: int, msg: str, *, exc: bool = False, **extra: object) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ConnectionError("Cannot connect to host slack.com:443\nsecond line")
        except ConnectionError:
            exc_info = sys.exc_info()
    record = logging.LogRecord(name, level, __file__, 1, msg, None, exc_info)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_text_lines_are_one_line_with_fields_and_no_secrets() -> None:
    record = _record("crewagent.serve", logging.INFO, "crewagent is up", mode="socket", token=BOT_TOKEN, note="two words")
    line = TextFormatter().format(record)
    assert "\n" not in line
    assert " INFO    crewagent.serve: crewagent is up  mode=socket" in line
    assert 'note="two words"' in line
    assert BOT_TOKEN not in line and "xoxb-[redacted]" in line


def test_an_expected_failure_is_one_line_and_a_crash_keeps_its_traceback() -> None:
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    text, as_json = TextFormatter(), JsonFormatter()
    retried = _record("crewagent.bot.connection", logging.WARNING, "auth.test failed; retrying", exc=True)
    sdk = _record("crewagent.socket_mode", logging.ERROR, "Failed to connect; Retrying...", exc=True)
    crash = _record("crewagent.bot.threads.thread_worker", logging.ERROR, "thread job failed", exc=True)

    for record in (retried, sdk):
        line = text.format(record)
        assert "Traceback" not in line and "\n" not in line
        assert "error=\"ConnectionError: Cannot connect to host slack.com:443\"" in line
        entry = json.loads(as_json.format(record))
        assert "exc" not in entry and entry["error"] == "ConnectionError: Cannot connect to host slack.com:443"
    assert "Traceback (most recent call last)" in text.format(crash)
    assert "Traceback (most recent call last)" in json.loads(as_json.format(crash))["exc"]
    assert "Traceback" not in TextFormatter(crash_tracebacks=False).format(crash)

    root.setLevel(logging.DEBUG)  # debugging: every traceback
    assert "Traceback" in text.format(retried) and "exc" in json.loads(as_json.format(sdk))


def test_setup_logging_writes_text_or_json() -> None:
    for log_format in ("text", "json"):
        stream = io.StringIO()
        setup_logging("INFO", log_format=log_format, stream=stream)
        logging.getLogger("crewagent.serve").info("crewagent is up", extra={"mode": "http"})
        logging.getLogger("crewagent.socket_mode").info("A new session has been established")  # SDK chatter
        lines = stream.getvalue().splitlines()
        assert len(lines) == 1
        if log_format == "json":
            assert json.loads(lines[0])["msg"] == "crewagent is up"
        else:
            assert lines[0].endswith("crewagent.serve: crewagent is up  mode=http")


def test_the_log_format_comes_from_the_flag_then_the_environment() -> None:
    assert resolve_format(None, {}) == "text"
    assert resolve_format(None, {"CREWAGENT_LOG_FORMAT": "JSON"}) == "json"
    assert resolve_format("text", {"CREWAGENT_LOG_FORMAT": "json"}) == "text"
    with pytest.raises(ValueError, match="CREWAGENT_LOG_FORMAT: 'yaml' is not a log format; use one of: text, json"):
        resolve_format(None, {"CREWAGENT_LOG_FORMAT": "yaml"})
    args = build_parser().parse_args(["serve", "--log-format", "json"])
    assert args.log_format == "json"


def test_serve_refuses_an_unknown_log_format(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    monkeypatch.setenv("CREWAGENT_LOG_FORMAT", "yaml")
    args = build_parser().parse_args(["serve", "--project", str(project), "--package", str(EXAMPLES / "hello-branch")])
    assert serve_run(args) == 2
    assert "is not a log format" in capsys.readouterr().err


@pytest.mark.parametrize("verbose", [False, True])
async def test_the_terminal_shows_the_user_facing_error_without_log_lines(
    project: Path, tmp_path: Path, spawn: Spawner, verbose: bool
) -> None:
    env = {
        **os.environ,
        "CREWAGENT_MODEL": "scripted",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",  # nothing listens: every model call fails
        "OPENAI_API_KEY": "test",
        "CREWAGENT_HOME": str(tmp_path / "home"),
    }
    argv = ["run", str(EXAMPLES / "hello-branch"), "--project", str(project)] + (["--verbose"] if verbose else [])
    proc = await spawn(
        sys.executable, "-m", "crewagent.cli", *argv, cwd=REPO, env=env,
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    shown = out.decode() + err.decode()
    assert proc.returncode == 1
    assert "The model service could not be reached" in shown
    # The terminal's own error names the endpoint once, with the setting to check; log lines add it again.
    if verbose:
        assert shown.count("127.0.0.1:9") > 1  # the log, for whoever debugs it
    else:
        assert shown.count("127.0.0.1:9") == 1 and "check OPENAI_BASE_URL" in shown
        assert "crewagent.core.model" not in shown and "Traceback" not in shown
