"""Start-up: config validation, the serve command's exits, structured logs, and channel bindings."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from crewagent.bot.serve.app import build
from crewagent.bot.config import ConfigError, load_config
from crewagent.bot.logging import JsonFormatter, redact
from crewagent.cli.main import build_parser
from crewagent.cli.serve_cmd import run as serve_run
from tests.support.paths import EXAMPLES, REPO
from tests.support.fakes import APP_TOKEN, BOT_TOKEN, FakeSlack
from tests.support.processes import Spawner, free_port, kill_group, wait_healthy
from tests.support.bot_harness import make_config

STARTUP_WAIT = 60.0  # a fresh interpreter importing the bot can take long on a busy machine; only failures wait this long


def _serve(args: list[str]) -> int:
    return serve_run(build_parser().parse_args(["serve", *args]))


def test_config_file_binds_channels_relative_to_the_file(tmp_path: Path, project: Path) -> None:
    (tmp_path / "conf").mkdir()
    shutil.copytree(EXAMPLES / "multi-workflows", tmp_path / "conf" / "mw")
    cfg = tmp_path / "conf" / "crewagent.yml"
    cfg.write_text(
        f"project: {project}\n"
        f"packages: [{EXAMPLES / 'create-story-micro'}]\n"
        "channels:\n"
        "  C2:\n"
        f"    project: {project}\n"
        "    packages: [mw]\n"
        "model: gpt-test\n"
        "limits: {max_concurrent_runs: 3, run_token_budget: 500000}\n"
        "tool_policy: {max_read_bytes: 1000}\n"
        "access: {admins: [UADMIN]}\n"
    )
    config = load_config(config_path=cfg, env={})
    assert config.binding("C2").packages == [(tmp_path / "conf" / "mw").resolve()]
    assert config.binding_name("C7") == "default" and config.binding_name("C2") == "C2"
    assert config.model == "gpt-test" and config.limits.max_concurrent_runs == 3
    assert config.limits.run_token_budget == 500_000
    assert config.tool_policy.max_read_bytes == 1000 and config.access.admins == ["UADMIN"]
    assert config.slack.mode is None


def test_bad_config_names_file_key_and_reason(tmp_path: Path, project: Path) -> None:
    cfg = tmp_path / "crewagent.yml"
    cfg.write_text("limits:\n  max_concurrent_runs: 0\n  unknown_knob: 1\ntool_policy: {fs_enabled: maybe}\n")
    with pytest.raises(ConfigError) as err:
        load_config(config_path=cfg, project=project, env={})
    text = err.value.message
    assert f"{cfg}: limits.max_concurrent_runs:" in text
    assert f"{cfg}: limits.unknown_knob:" in text
    assert f"{cfg}: tool_policy.fs_enabled:" in text

    cfg.write_text("limits: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML at line"):
        load_config(config_path=cfg, env={})

    with pytest.raises(ConfigError, match="does not exist"):
        load_config(project=tmp_path / "nope", env={})
    with pytest.raises(ConfigError, match="packages: .*missing-pkg does not exist"):
        load_config(project=project, packages=[tmp_path / "missing-pkg"], env={})


def test_defaults_are_the_example_packages_and_the_current_directory(tmp_path: Path) -> None:
    config = load_config(env={"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s"}, cwd=REPO)
    assert [p.name for p in config.default.packages] == ["create-story-micro", "hello-branch", "multi-workflows"]
    assert config.default.project == REPO
    assert config.slack.mode == "http" and config.slack.api_url == "https://slack.com/api/"
    env = {"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1", "SLACK_API_URL": "http://x/api"}
    socket = load_config(env=env, cwd=REPO)
    assert socket.slack.mode == "socket" and socket.slack.api_url == "http://x/api/"


def test_serve_without_tokens_explains_how_to_set_up(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _serve(["--project", str(project)]) == 2
    err = capsys.readouterr().err
    for needle in ("manifest.yml", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN", "SLACK_SIGNING_SECRET", "crewagent chat"):
        assert needle in err


def test_serve_without_a_model_or_with_bad_config_fails_clearly(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    assert _serve(["--project", str(project)]) == 2
    assert "CREWAGENT_MODEL" in capsys.readouterr().err

    cfg = tmp_path / "bad.yml"
    cfg.write_text("acess: {}\n")
    assert _serve(["--config", str(cfg)]) == 2
    assert f"{cfg}: acess:" in capsys.readouterr().err


def test_serve_reports_package_problems(project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(EXAMPLES / "hello-branch", broken)
    graph = json.loads((broken / "workflow.graph.json").read_text())
    graph["entryNodeId"] = "no-such-node"
    (broken / "workflow.graph.json").write_text(json.dumps(graph))
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    monkeypatch.setenv("CREWAGENT_MODEL", "m")
    assert _serve(["--project", str(project), "--package", str(broken)]) == 2
    err = capsys.readouterr().err
    assert f"The package {broken} is invalid" in err
    assert "workflow.graph.json" in err and "no-such-node" in err


def test_logs_are_json_lines_without_tokens() -> None:
    record = logging.LogRecord("crewagent", logging.WARNING, __file__, 1, "token %s leaked", ("xoxb-123-abc",), None)
    record.call = "chat.postMessage"
    record.headers = {"Authorization": "Bearer xapp-1-A1-secret"}
    line = JsonFormatter().format(record)
    data = json.loads(line)
    assert data["level"] == "warning" and data["call"] == "chat.postMessage"
    assert "xoxb-123" not in line and "xapp-1-A1" not in line and "xoxb-[redacted]" in data["msg"]
    assert redact("key sk-abcdefghijklmnop") == "key sk-[redacted]"


async def test_channels_bound_to_other_packages_greet_with_their_agents(project: Path, tmp_path: Path) -> None:
    async with FakeSlack() as slack:
        config = make_config(slack, project, ["create-story-micro"])
        other = load_config(project=project, packages=[EXAMPLES / "multi-workflows"], env={})
        config.channels["C2"] = other.default
        bot = build(config)
        try:
            assert [p.id for p in bot.dispatcher.bindings["default"].packages] == ["create-story-micro"]
            assert [p.id for p in bot.dispatcher.bindings["C2"].packages] == ["multi-workflows"]
        finally:
            await bot.close()


async def test_serve_process_connects_over_socket_mode_serves_health_and_stops_on_sigterm(
    project: Path, tmp_path: Path, spawn: Spawner
) -> None:
    port = free_port()
    async with FakeSlack() as slack, aiohttp.ClientSession() as http:
        env = {
            **os.environ,
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_APP_TOKEN": APP_TOKEN,
            "SLACK_API_URL": slack.api_url,
            "CREWAGENT_MODEL": "scripted",
            "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
            "CREWAGENT_HOME": str(tmp_path / "home"),
            "CREWAGENT_LOG_FORMAT": "json",
        }
        proc = await spawn(
            sys.executable, "-m", "crewagent.cli", "serve", "--project", str(project),
            "--package", str(EXAMPLES / "hello-branch"), "--port", str(port),
            cwd=REPO, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            await slack.socket_mode.wait_connected(timeout=STARTUP_WAIT)
            opened = slack.calls_to("apps.connections.open")
            assert opened, "Socket Mode asked SLACK_API_URL for its websocket"
            health = await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=STARTUP_WAIT)
            assert health["ok"] is True and health["socket_mode"] == "connected"
            proc.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(proc.communicate(), 10)
        finally:
            kill_group(proc.pid)
            if proc.returncode is None:
                await proc.wait()
        assert proc.returncode == 0
        lines = [json.loads(line) for line in stderr.decode().splitlines() if line.startswith("{")]
        assert any(entry["msg"] == "crewagent is up" for entry in lines)
        assert BOT_TOKEN not in stderr.decode() and APP_TOKEN not in stderr.decode()


def test_workers_key_is_refused_with_what_to_do_instead(project: Path, tmp_path: Path) -> None:
    old = tmp_path / "crewagent.yml"
    old.write_text("workers: 2\n")
    with pytest.raises(ConfigError, match="run several `crewagent serve` replicas"):
        load_config(config_path=old, project=project, packages=[EXAMPLES / "hello-branch"], env={})


def test_database_url_comes_from_the_file_or_the_environment(project: Path, tmp_path: Path) -> None:
    packages = [EXAMPLES / "hello-branch"]
    env = {"CREWAGENT_DATABASE_URL": "postgresql://u@db/crew"}
    assert load_config(project=project, packages=packages, env=env).database_url == "postgresql://u@db/crew"
    assert load_config(project=project, packages=packages, env={}).database_url is None
    file = tmp_path / "crewagent.yml"
    file.write_text("database_url: postgresql://u@other/crew\nlease_seconds: 3\n")
    config = load_config(config_path=file, project=project, packages=packages, env=env)
    assert config.database_url == "postgresql://u@other/crew" and config.lease_seconds == 3
    with pytest.raises(ConfigError, match="CREWAGENT_DATABASE_URL: must start with postgresql://"):
        load_config(project=project, packages=packages, env={"CREWAGENT_DATABASE_URL": "mysql://x"})


def test_models_name_the_default_and_the_allowed_ones_and_the_environment_stays_the_default(
    project: Path, tmp_path: Path
) -> None:
    packages = [EXAMPLES / "hello-branch"]
    env = {"CREWAGENT_MODEL": "from-env"}
    plain = load_config(project=project, packages=packages, env=env)
    assert plain.model == "from-env" and plain.models is None  # no `models:`: the environment's model only
    file = tmp_path / "crewagent.yml"
    file.write_text("models: {default: small, allowed: [small, large]}\n")
    config = load_config(config_path=file, project=project, packages=packages, env=env)
    assert config.model == "small" and config.models is not None and config.models.allowed == ["small", "large"]

    file.write_text("models: {default: huge, allowed: [small, large]}\n")
    with pytest.raises(ConfigError, match="models: .*the default model 'huge' is not in allowed"):
        load_config(config_path=file, project=project, packages=packages, env=env)
    file.write_text("model: other\nmodels: {default: small, allowed: [small]}\n")
    with pytest.raises(ConfigError, match="model: 'other' differs from models.default 'small'"):
        load_config(config_path=file, project=project, packages=packages, env=env)
    file.write_text("models: {default: small, alowed: [small]}\n")
    with pytest.raises(ConfigError, match="models.alowed"):
        load_config(config_path=file, project=project, packages=packages, env=env)


def test_forge_takes_its_token_from_the_environment_only(project: Path, tmp_path: Path) -> None:
    packages = [EXAMPLES / "hello-branch"]
    file = tmp_path / "crewagent.yml"
    file.write_text("forge: {kind: github, api_url: https://ghe.example/api/v3/, token: \"${FORGE_TOKEN}\"}\n")
    config = load_config(config_path=file, project=project, packages=packages, env={"FORGE_TOKEN": "ghp_secret"})
    assert config.forge is not None and config.forge.api_url == "https://ghe.example/api/v3"
    assert config.forge.token_variable == "FORGE_TOKEN" and "ghp_secret" not in config.model_dump_json()
    with pytest.raises(ConfigError, match=r"forge.token: \$\{FORGE_TOKEN\} is not set in the environment"):
        load_config(config_path=file, project=project, packages=packages, env={})
    file.write_text("forge: {token: ghp_literal_token}\n")
    with pytest.raises(ConfigError) as err:
        load_config(config_path=file, project=project, packages=packages, env={})
    assert "forge.token" in err.value.message and "ghp_literal_token" not in err.value.message
    assert load_config(project=project, packages=packages, env={}).forge is None


def test_serve_raises_the_open_file_limit_for_many_runs() -> None:
    script = (
        "import resource\n"
        "from cli.serve_cmd import raise_open_file_limit\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))\n"
        "raise_open_file_limit()\n"
        "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0] > 256 or hard == 256)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.stdout.strip() == "True", done.stderr


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write to any folder, so no folder is unwritable to it")
def test_serve_refuses_a_project_it_cannot_write_and_says_how_to_fix_it(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("SLACK_APP_TOKEN", APP_TOKEN)
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    project.chmod(0o555)
    try:
        assert _serve(["--project", str(project), "--package", str(EXAMPLES / "hello-branch")]) == 2
    finally:
        project.chmod(0o755)
    err = capsys.readouterr().err
    assert f"The project folder {project} is not writable" in err and "chown" in err and "--user" in err


async def test_llm_section_sets_the_model_calls_and_the_file_wins_over_the_environment(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREWAGENT_LLM_STREAM", "1")
    monkeypatch.setenv("CREWAGENT_LLM_RETRIES", "5")
    cfg = tmp_path / "crewagent.yml"
    cfg.write_text("llm: {timeout_seconds: 7, max_retries: 1, stream: false}\n")
    async with FakeSlack() as slack:
        config = make_config(slack, project, ["create-story-micro"])
        config.llm = load_config(config_path=cfg, project=project, env={}).llm
        bot = build(config)
        try:
            settings = bot.engine.llm.settings
            assert (settings.timeout, settings.max_retries, settings.stream) == (7, 1, False)
        finally:
            await bot.close()
    bad = tmp_path / "bad.yml"
    bad.write_text("llm: {stream: sometimes}\n")
    with pytest.raises(ConfigError) as err:
        load_config(config_path=bad, project=project, env={})
    assert "llm.stream" in str(err.value)
