"""`crewagent run` and `chat` with `--config` inside a plain-folder project: the file tools never show or
change that file (its database password, its command policy), with or without `commands:`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support.cli_driver import cli
from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.hidden_config import LOOKED, assert_hidden, config_prober, plain_project_with_config
from tests.support.linear_package import make_linear_package


async def test_run_with_config_cannot_read_or_rewrite_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = plain_project_with_config(tmp_path)
    package = make_linear_package(tmp_path / "pkg", nodes=2)
    seen: dict[str, dict[str, Any]] = {}
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    async with ScriptedLLM(responder=config_prober(seen)) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code, out, err = await cli(
            ["run", str(package), "--project", str(config.parent), "--config", str(config)], "", monkeypatch, capsys
        )
    assert LOOKED in out and "Traceback" not in out + err, (code, out, err)
    assert_hidden(seen, config)


async def test_chat_with_config_cannot_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = plain_project_with_config(tmp_path)
    package = make_linear_package(tmp_path / "pkg", nodes=2)
    seen: dict[str, dict[str, Any]] = {}
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    async with ScriptedLLM(responder=config_prober(seen)) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code, out, err = await cli(
            ["chat", str(package), "--project", str(config.parent), "--config", str(config)],
            "Wren\nwhat is in the project?\n", monkeypatch, capsys,
        )
    assert LOOKED in out and "Traceback" not in out + err, (code, out, err)
    assert_hidden(seen, config, writes_offered=False)
