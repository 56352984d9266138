"""commands: policy for shell_run: rules, compound commands, what cannot be checked, approval, configuration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crewagent.bot.config import ConfigError, load_config
from crewagent.core.package.models import Agent
from crewagent.core.tools.base import EffectivePolicy, Mounts, ToolContext
from crewagent.core.tools.policy import SystemToolPolicy, effective_policy
from crewagent.core.tools.registry import ToolHost, available
from crewagent.core.tools.shell.command_config import CommandsConfig
from crewagent.core.tools.shell.command_line import CommandLineInvalid
from crewagent.core.tools.shell.command_policy import decide
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from tests.support.shell_sandbox import ShellBench, commands, make_bench

POLICY = CommandsConfig.model_validate({
    "default": "ask",
    "rules": [
        {"prefix": "python -m pytest", "decision": "allow"},
        {"prefix": "git diff", "decision": "allow"},
        {"prefix": "git", "decision": "ask"},
        {"prefix": "uv run @pkg/", "decision": "allow"},
        {"prefix": "git push", "decision": "forbid"},
        {"prefix": "ls", "decision": "allow"},
        {"prefix": "rm -rf", "decision": "forbid"},
    ],
})


@pytest.mark.parametrize(("line", "expected"), [
    ("python -m pytest -q tests", "allow"),
    ("FOO=1 python -m pytest", "allow"),
    ("git diff HEAD -- src", "allow"),
    ("git difftool", "ask"),  # whole words: 'git diff' does not name 'git difftool'
    ("git status", "ask"),
    ("uv run @pkg/scripts/sprint_plan.py --x", "allow"),
    ("uv run elsewhere.py", "ask"),
    ("make", "ask"),  # the default
    ("git push origin main", "forbid"),
    ("/usr/bin/git push", "forbid"),  # a command named by its path is its name
    ("g''it pu\\sh", "forbid"),  # quoting does not hide the words
    ("ls && git push", "forbid"),  # every part is checked
    ("ls | python -m pytest", "allow"),
    ("(ls; git push --force)", "forbid"),  # subshells too
    ("ls; make test", "ask"),  # the strictest part wins
    ("echo $(git push)", "forbid"),  # a forbidden prefix inside a substitution
    ("echo `rm -rf /`", "forbid"),
    ("ls $(cat list)", "ask"),  # what cannot be checked asks, even after an allowed command
    ("eval ls", "ask"),
    ("bash -c 'ls'", "ask"),
    ("$CMD --flag", "ask"),
    ("xargs rm < files", "ask"),
    ("f() { ls; }; f", "ask"),
    ("if true; then git push; fi", "forbid"),
    ("for f in a b; do python -m pytest $f; done", "allow"),
    ("env", "ask"),  # env alone prints; no rule names it, so the default
    ("ls ${X:-$(make)}", "ask"),  # a substitution the parser does not model still asks
    ("cat <<EOF\n$(make)\nEOF", "ask"),  # a here-document runs its substitutions
    ("PATH=@project/bin:$PATH git diff", "ask"),  # which `git` runs is no longer what the rule names
    ("export LD_PRELOAD=x.so; ls", "ask"),
    ("GIT_DIR=/x git diff", "ask"),
    ("LANG=C ls", "allow"),
])
def test_decisions(line: str, expected: str) -> None:
    assert decide(line, POLICY).decision == expected


def test_allowed_default_still_asks_for_what_cannot_be_checked() -> None:
    permissive = CommandsConfig(default="allow")
    assert decide("ls -la", permissive).decision == "allow"
    assert decide("echo $(whoami)", permissive).decision == "ask"
    assert decide("sh -c 'echo hi'", permissive).decision == "ask"


@pytest.mark.parametrize("line", ['echo "unterminated', "ls &&", "", "   ", "a\x00b", "(ls"])
def test_unparseable_lines_are_invalid(line: str) -> None:
    with pytest.raises(CommandLineInvalid):
        decide(line, POLICY)


def test_allowed_for_the_run_covers_every_part_or_nothing() -> None:
    verdict = decide("make test", POLICY)
    assert verdict.decision == "ask" and verdict.allow_for_run == "make test"
    assert decide("python -m mypy src", POLICY).allow_for_run == "python -m mypy"
    assert decide("make test -j2", POLICY, {"make test"}).decision == "allow"
    assert decide("make test && make lint", POLICY, {"make test"}).decision == "ask"
    assert decide("make test && ls", POLICY, {"make test"}).decision == "allow"  # ls is allowed by a rule
    assert decide("make test && git push", POLICY, {"make test", "git push"}).decision == "forbid"
    assert decide("echo $(make test)", POLICY, {"make test", "echo"}).decision == "ask"


@pytest.fixture
async def bench(tmp_path: Path) -> ShellBench:
    made = make_bench(tmp_path, commands(default="ask", rules=[
        {"prefix": "touch", "decision": "allow"}, {"prefix": "git push", "decision": "forbid"}]))
    if not (await sandbox_state(made.config)).usable:
        pytest.skip("bubblewrap does not work on this machine")
    return made


async def test_a_forbidden_command_never_runs(bench: ShellBench) -> None:
    result = await bench.run("touch @project/ran && git push origin main")
    assert result["ok"] is False and result["error"]["code"] == "COMMAND_FORBIDDEN"
    assert not (bench.project / "ran").exists()
    forced = await bench.run("touch @project/ran; git push", approved="the owner")  # approval cannot lift a forbid
    assert forced["error"]["code"] == "COMMAND_FORBIDDEN" and not (bench.project / "ran").exists()
    [first, second] = bench.commands_audited()
    assert first["refused"] == "COMMAND_FORBIDDEN" and first["rule"] == "git push" and "exitCode" not in first


async def test_a_command_that_asks_waits_for_the_owner_then_runs(bench: ShellBench) -> None:
    waiting = await bench.call("echo hi > made.txt", timeout_seconds=5)
    assert waiting.result == {} and not (bench.project / "made.txt").exists()
    request = waiting.approval
    assert request is not None and request.kind == "command" and request.denied_code == "COMMAND_DENIED"
    assert "echo hi > made.txt" in request.message and "timeout 5 s" in request.message
    assert request.allow_for_run == "echo hi"
    approved = await bench.call("echo hi > made.txt", approved="U123")
    assert approved.result["ok"] is True and (bench.project / "made.txt").read_text() == "hi\n"
    assert bench.commands_audited()[-1]["approvedBy"] == "U123"
    again = await bench.call("echo hi there", allowed_for_run=frozenset({"echo hi"}))
    assert again.approval is None and again.result["stdout"] == "hi there\n"


async def test_invalid_lines_and_timeouts_beyond_the_cap(bench: ShellBench) -> None:
    result = await bench.run('touch "oops')
    assert result["error"]["code"] == "COMMAND_INVALID"
    capped = await bench.call("touch x", timeout_seconds=10_000)
    assert capped.result["ok"] is True  # a call may ask for more; it gets the operator's cap
    missing = await bench.host.execute("shell_run", json.dumps({"cwd": "@project"}), bench.context())
    assert missing.result["error"]["code"] == "E_INVALID_ARGS"


def _agent(tools: dict | None) -> Agent:
    data = {"id": "dev", "metadata": {"name": "Amelia", "title": "Developer", "icon": "x"},
            "persona": {"role": "dev", "identity": "i", "communication_style": "c", "principles": "p"}}
    if tools is not None:
        data["tools"] = tools
    return Agent.model_validate(data)


def test_the_tool_is_offered_only_with_commands_and_not_to_agents_that_opt_out(tmp_path: Path) -> None:
    mounts = Mounts(project=tmp_path, pkg=tmp_path, state=tmp_path)

    def offered(system: SystemToolPolicy, agent: Agent, mode: str = "run") -> bool:
        ctx = ToolContext(mounts=mounts, policy=effective_policy(system, agent), mode=mode, agent_id="dev")  # type: ignore[arg-type]
        names = [s["function"]["name"] for s in ToolHost().specs(ctx)]
        return "shell_run" in names and "shell_run" in available(ctx)

    on = SystemToolPolicy(commands=CommandsConfig())
    assert not offered(SystemToolPolicy(), _agent(None))
    assert offered(on, _agent(None))
    assert offered(on, _agent({"shell": {"enabled": True}}))
    assert not offered(on, _agent({"shell": {"enabled": False}}))
    assert not offered(on, _agent(None), mode="chat")
    assert "shell_run" not in available(ToolContext(mounts=mounts, policy=EffectivePolicy(), mode="run", agent_id="x"))


def test_crewagent_yml_commands_section(tmp_path: Path, project: Path) -> None:
    config = tmp_path / "crewagent.yml"
    config.write_text(
        f"project: {project}\npackages: []\n"
        "commands:\n"
        "  default: ask\n"
        "  rules:\n"
        "    - {prefix: \"python -m pytest\", decision: allow}\n"
        "    - {prefix: \"git push\", decision: forbid}\n"
        "  timeout_seconds: 120\n"
        "  network: false\n"
        "  env: {PIP_INDEX_URL: \"${PIP_INDEX_URL}\"}\n"
        "  output_limit_bytes: 16384\n"
    )
    loaded = load_config(config_path=config, packages=[str(project)], env={"PIP_INDEX_URL": "https://m.invalid/"})
    cmds = loaded.tool_policy.commands
    assert cmds is not None and cmds.timeout_seconds == 120 and cmds.output_limit_bytes == 16384
    assert [r.prefix for r in cmds.rules] == ["python -m pytest", "git push"]
    assert cmds.resolved_env({"PIP_INDEX_URL": "https://m.invalid/"}) == {"PIP_INDEX_URL": "https://m.invalid/"}
    assert str(config.resolve()) in loaded.tool_policy.hidden  # the config file is never visible to a command
    with pytest.raises(ConfigError) as missing:
        load_config(config_path=config, packages=[str(project)], env={})
    assert "commands.env: ${PIP_INDEX_URL} is not set" in str(missing.value)
    config.write_text(f"project: {project}\ncommands:\n  default: sometimes\n")
    with pytest.raises(ConfigError) as bad:
        load_config(config_path=config, packages=[str(project)], env={})
    assert "commands.default" in str(bad.value)
    config.write_text(f"project: {project}\n")
    assert load_config(config_path=config, packages=[str(project)], env={}).tool_policy.commands is None


async def test_sandbox_none_runs_without_one_and_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from crewagent.core.tools.shell.command_sandbox import start_up_line

    made = make_bench(tmp_path, commands(sandbox="none"))
    level, line = await start_up_line(made.config)
    assert level == logging.WARNING and "sandbox is OFF" in line
    result = await made.run("pwd; echo $HOME; touch @project/made; sleep 60 & echo bg")
    assert result["ok"] is True and result["stdout"].splitlines()[0] == "@project", result
    assert (made.project / "made").is_file() and str(made.project) not in str(result)
    assert made.commands_audited()[-1]["sandbox"] == "none"


def test_a_denied_command_is_audited(tmp_path: Path) -> None:
    from crewagent.core.tools.shell.shell_run import audit_denied

    made = make_bench(tmp_path)
    audit_denied(made.context(), {"command": "make deploy", "cwd": "@project/app"}, "U42")
    [event] = made.commands_audited()
    assert event["command"] == "make deploy" and event["cwd"] == "@project/app"
    assert event["refused"] == "COMMAND_DENIED" and event["deniedBy"] == "U42" and "exitCode" not in event


def test_agents_json_may_switch_the_tool_off_and_is_validated(tmp_path: Path) -> None:
    from crewagent.core.base.errors import CrewError
    from crewagent.core.package.loader import load_package
    from tests.support.linear_package import make_linear_package

    root = make_linear_package(tmp_path / "pkg", nodes=2)
    agents = json.loads((root / "agents.json").read_text())
    agents["agents"][0]["tools"]["shell"] = {"enabled": False}
    (root / "agents.json").write_text(json.dumps(agents))
    agent = load_package(root, cache_dir=tmp_path / "cache").agent("writer")
    assert agent is not None and agent.tools is not None and agent.tools.shell is not None
    assert agent.tools.shell.enabled is False
    agents["agents"][0]["tools"]["shell"] = {"enabled": "sometimes"}
    (root / "agents.json").write_text(json.dumps(agents))
    with pytest.raises(CrewError):
        load_package(root, cache_dir=tmp_path / "cache2")


async def test_valid_shell_the_checker_cannot_read_asks(bench: ShellBench) -> None:
    line = "[[ -d @project ]] && case x in x) touch made;; esac"
    waiting = await bench.call(line)
    assert waiting.approval is not None and "cannot be checked" in waiting.approval.message
    assert not (bench.project / "made").exists()
    ran = await bench.call(line, approved="U1")
    assert ran.result["exitCode"] == 0 and (bench.project / "made").is_file()
    forbidden = await bench.run("[[ -d x ]] || git push")
    assert forbidden["error"]["code"] == "COMMAND_FORBIDDEN"
