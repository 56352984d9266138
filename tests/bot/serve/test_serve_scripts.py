"""serve prepares its packages' BMAD scripts at start-up, so a package's first `uv run` does not wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from crewagent.bot.config import BotConfig
from crewagent.core.package.script_deps import ScriptPrepError, scripts_ready, system_python
from crewagent.core.tools.shell.command_config import CommandsConfig
from tests.support.bot_harness import bot_harness
from tests.support.linear_package import make_linear_package
from tests.support.wheels import write_wheel

SCRIPT = '# /// script\n# dependencies = ["tinydep"]\n# ///\nimport tinydep\nprint(tinydep.GREETING)\n'


def with_commands(config: BotConfig) -> None:
    commands = CommandsConfig.model_validate({"default": "ask"})
    config.tool_policy = config.tool_policy.model_copy(update={"commands": commands})


async def test_serve_prepares_the_scripts_of_every_bound_package_at_start_up(
        project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        system_python()
    except ScriptPrepError as exc:
        pytest.skip(str(exc))
    source = tmp_path / "source-wheels"
    write_wheel(source, "tinydep", "1.0", 'GREETING = "hello"\n')
    monkeypatch.setenv("UV_OFFLINE", "1")  # no index: the local folder is the only source
    monkeypatch.setenv("UV_FIND_LINKS", str(source))
    package = make_linear_package(tmp_path / "pkg", nodes=2)
    (package / "scripts").mkdir()
    (package / "scripts" / "greet.py").write_text(SCRIPT, encoding="utf-8")
    async with bot_harness(project, packages=[str(package)], configure=with_commands):
        ready = await scripts_ready(package, timeout=60)  # started by serve, before any command ran
        assert ready is not None and ready.prepared == ("@pkg/scripts/greet.py",), ready
        ((host_wheels, _),) = ready.read_only
        assert [w.name for w in Path(host_wheels).iterdir()] == ["tinydep-1.0-py3-none-any.whl"]
