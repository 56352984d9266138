"""A BMAD script with a PEP 723 dependency runs in the sandbox with `uv run`: its dependency is prepared
outside first (from a local wheel folder, no index), and inside uv resolves it offline."""

from __future__ import annotations

from pathlib import Path

import pytest

from crewagent.core.package.script_deps import ScriptPrepError, system_python
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from crewagent.core.tools.shell.script_hookup import with_scripts
from tests.support.shell_sandbox import commands, make_bench
from tests.support.wheels import write_wheel

SCRIPT = """# /// script
# requires-python = ">=3.10"
# dependencies = ["tinydep"]
# ///
import tinydep
print(tinydep.GREETING)
"""


async def test_a_package_script_with_a_dependency_runs_offline_in_the_sandbox(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        system_python()
    except ScriptPrepError as exc:
        pytest.skip(str(exc))
    source = tmp_path / "source-wheels"
    write_wheel(source, "tinydep", "1.0", 'GREETING = "hello from tinydep"\n')
    monkeypatch.setenv("UV_OFFLINE", "1")  # the preparer's uv sees only the local folder
    monkeypatch.setenv("UV_FIND_LINKS", str(source))
    bench = make_bench(tmp_path / "b", with_scripts(commands(), tmp_path / "home"))
    if not (await sandbox_state(bench.config)).usable:
        pytest.skip("bubblewrap does not work on this machine")
    (bench.pkg / "scripts" / "greet.py").write_text(SCRIPT)
    result = await bench.run("uv run @pkg/scripts/greet.py", timeout_seconds=120)
    assert result["ok"] is True and result["exitCode"] == 0, result
    assert result["stdout"] == "hello from tinydep\n"
    assert str(tmp_path) not in str(result)
    again = await bench.run("uv run --no-project @pkg/scripts/greet.py")  # prepared once; still offline
    assert again["stdout"] == "hello from tinydep\n", again
