"""MCP tools in the terminal: `crewagent run` / `chat` with `--config crewagent.yml` and y/N approvals."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.mcp.tracker import ASK, CREATED, LOOKED_UP, NOT_CREATED, TRACKER_SERVER, TrackerModel, mcp_package
from tests.support.cli_driver import cli


def _config(tmp_path: Path, tickets: Path) -> Path:
    path = tmp_path / "crewagent.yml"
    servers = {"tracker": {"command": sys.executable, "args": [str(TRACKER_SERVER)],
                           "env": {"TRACKER_FILE": str(tickets), "TRACKER_TOKEN": "${TRACKER_TOKEN}"}}}
    path.write_text(json.dumps({"mcp_servers": servers}), encoding="utf-8")  # JSON is YAML
    return path


@pytest.fixture
def tickets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    monkeypatch.setenv("TRACKER_TOKEN", "tok-terminal-secret")
    path = tmp_path / "tickets.txt"
    path.write_text("", encoding="utf-8")
    return path


async def test_run_asks_y_n_before_a_change_and_respects_no(
    project: Path, tmp_path: Path, tickets: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = TrackerModel()
    stdin = "please look up T-1\nnow open a ticket\ny\nopen a ticket again\n\ngo on\n"
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        llm.responder = model
        code, out, err = await cli(
            ["run", str(mcp_package(tmp_path)), "--project", str(project), "--workflow", "hello-linear",
             "--agent", "analyst", "--config", str(_config(tmp_path, tickets))],
            stdin, monkeypatch, capsys,
        )
    assert code == 0, err
    assert ASK in out and LOOKED_UP in out
    assert out.count("Approve a tool call?") == 2 and out.count("[y/N]") == 2
    assert CREATED in out and NOT_CREATED in out and "Not approved: the call is not made." in out
    assert tickets.read_text() == "Fix the login page\n"
    assert not any(n.startswith("tracker__") for n in model.offered["step-02-generate"])
    assert "tok-terminal-secret" not in out + err and "Traceback" not in out + err


async def test_chat_agent_uses_read_only_tools_only(
    project: Path, tmp_path: Path, tickets: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = TrackerModel()
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        llm.responder = model
        code, out, err = await cli(
            ["chat", str(mcp_package(tmp_path)), "--project", str(project), "--config", str(_config(tmp_path, tickets))],
            "Mary\nplease look up T-1\n", monkeypatch, capsys,
        )
    assert LOOKED_UP in out, out + err
    offered = [n for names in model.offered.values() for n in names]
    assert "tracker__lookup_ticket" in offered and "tracker__create_ticket" not in offered


async def test_a_bad_config_is_reported_with_its_key(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    monkeypatch.delenv("NOT_SET_ANYWHERE", raising=False)
    path = tmp_path / "crewagent.yml"
    path.write_text("mcp_servers:\n  bad__name: {command: x}\n  t: {command: x, env: {K: '${NOT_SET_ANYWHERE}'}}\n"
                    "  u: {url: 'ftp://x'}\n", encoding="utf-8")
    code, out, err = await cli(["run", str(mcp_package(tmp_path)), "--project", str(project), "--config", str(path)],
                               "", monkeypatch, capsys)
    assert code == 2 and "mcp_servers.u" in err and "http://" in err
    path.write_text("mcp_servers:\n  bad__name: {command: x}\n  t: {command: x, env: {K: '${NOT_SET_ANYWHERE}'}}\n",
                    encoding="utf-8")
    code, out, err = await cli(["validate", str(path)], "", monkeypatch, capsys)
    assert code == 1
    assert "mcp_servers.bad__name: invalid server name" in err
    assert "mcp_servers.t: ${NOT_SET_ANYWHERE} is not set in the environment" in err


async def test_run_offers_allow_for_the_run_with_a(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`a` approves the call and allows its prefix for the rest of the run; a later call outside it asks."""
    from crewagent.core.tools import registry
    from tests.support.probe_tool import PROBE, commands_model, probe_tool

    ran: list[tuple[str, str | None]] = []
    monkeypatch.setitem(registry.TOOLS, PROBE, probe_tool(ran))
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        llm.responder = commands_model
        code, out, err = await cli(
            ["run", str(mcp_package(tmp_path)), "--project", str(project), "--workflow", "hello-linear",
             "--agent", "analyst"],
            "diff please\na\nonce more\nn\n", monkeypatch, capsys,
        )
    assert "Run a command?" in out and "[y/N/a]" in out and "allow `git diff` for the rest of this run" in out
    assert "Diffed twice. What next?" in out and "Not removed. What next?" in out
    assert [c for c, _ in ran] == ["git diff --stat", "git diff HEAD", "git diff main"]
    assert ran[0][1] is not None and ran[0][1].endswith("(terminal)") and ran[1][1] is None
    assert out.count("Run a command?") == 2 and "Traceback" not in out + err, (code, err)
