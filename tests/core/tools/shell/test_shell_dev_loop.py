"""A dev agent's loop in the terminal: run the tests, see them fail, fix the code, run them again, pass.

Real CLI (`crewagent run --config`), real openai client against the scripted model, real bwrap.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from crewagent.cli.main import main
from crewagent.core.tools.shell.command_config import CommandsConfig
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.linear_package import make_linear_package
from tests.support.shell_sandbox import BROKEN, FIXED, PYTEST, TOOLCHAIN, dev_responder


async def test_a_dev_agent_fixes_failing_tests_in_the_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    if not (await sandbox_state(CommandsConfig())).usable:
        pytest.skip("bubblewrap does not work on this machine")
    project = tmp_path / "project"
    project.mkdir()
    (project / "calc.py").write_text(BROKEN)
    (project / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    package = make_linear_package(tmp_path / "pkg", nodes=2)
    config = tmp_path / "crewagent.yml"
    config.write_text(json.dumps({"commands": {
        "default": "forbid", "rules": [{"prefix": "python -m pytest", "decision": "allow"}],
        "timeout_seconds": 120, "toolchain": list(TOOLCHAIN),
    }}))
    home = tmp_path / "home"
    monkeypatch.setenv("CREWAGENT_HOME", str(home))
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    seen: list[dict[str, Any]] = []
    async with ScriptedLLM(responder=dev_responder(seen)) as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        code = await asyncio.to_thread(
            main, ["run", str(package), "--project", str(project), "--config", str(config)])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert f"  $ {PYTEST}" in out and "→ exit 1 after" in out and "→ exit 0 after" in out
    assert "shell_run rm -rf @project/* — COMMAND_FORBIDDEN" in out
    assert (project / "calc.py").read_text() == FIXED
    assert (project / "test_calc.py").is_file()  # the forbidden rm never ran
    forbidden, failing, passing = seen
    assert forbidden["error"]["code"] == "COMMAND_FORBIDDEN"
    assert failing["exitCode"] == 1 and "1 failed" in failing["stdout"]
    assert passing["exitCode"] == 0 and "1 passed" in passing["stdout"]
    assert str(project) not in json.dumps(seen)
    [audit_log] = home.glob("projects/*/runs/*/state/logs/execution.jsonl")
    events = [json.loads(line) for line in audit_log.read_text().splitlines()]
    commands = [e for e in events if e.get("kind") == "command.run"]
    assert [(e.get("refused"), e.get("exitCode")) for e in commands] == [("COMMAND_FORBIDDEN", None), (None, 1), (None, 0)]
    assert all(e["sandbox"] in ("bwrap", None) for e in commands)
    logs = list(audit_log.parent.glob("commands/*.log"))
    assert len(logs) == 2 and any("1 passed" in p.read_text() for p in logs)
