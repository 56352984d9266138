"""An imported BMAD v6.11 package runs its own scripts in the real sandbox (bubblewrap, network off).

The commands are the ones the imported texts write (`uv run @pkg/_bmad/…`), with only their
placeholders filled in, run through shell_run. The scripts' dependencies are prepared with no index
at all (UV_OFFLINE), so the two scripts that need `ruamel.yaml` are reported not ready, and the rest run.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from crewagent.core.bmad_import import import_bmad, write_package
from crewagent.core.package.script_deps import ScriptPrepError, system_python
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from crewagent.core.tools.shell.script_hookup import with_scripts
from tests.support.shared_files import BMAD_V611_SRC, require
from tests.support.shell_sandbox import ShellBench, commands


def _command(text: str, script: str, verb: str) -> str:
    """The first `uv run @pkg/…/<script> <verb> …` line the imported text writes."""
    found = re.search(rf"uv run @pkg/\S*/{re.escape(script)} {verb}[^`\n]*", text)
    assert found is not None, f"no `{script} {verb}` command in the text"
    return found.group(0)


@pytest.fixture
async def bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ShellBench:
    require(BMAD_V611_SRC)
    try:
        system_python()
    except ScriptPrepError as exc:
        pytest.skip(str(exc))
    monkeypatch.setenv("UV_OFFLINE", "1")  # preparation sees no index: nothing is downloaded
    pkg = tmp_path / "pkg"
    write_package(import_bmad(BMAD_V611_SRC), pkg)
    project, state = tmp_path / "project", tmp_path / "runs" / "r1" / "state"
    project.mkdir()
    state.mkdir(parents=True)
    made = ShellBench(project, pkg, state, with_scripts(commands(), tmp_path / "home"))
    if not (await sandbox_state(made.config)).usable:
        pytest.skip("bubblewrap does not work on this machine")
    return made


async def test_the_imported_texts_script_commands_run_in_the_sandbox(bench: ShellBench) -> None:
    ux = (bench.pkg / "_bmad/bmm/plan/bmad-ux/SKILL.md").read_text(encoding="utf-8")
    init = _command(ux, "memlog.py", "init").replace("{doc_workspace}", "@project/ux").replace(
        'topic="<product/UX>"', 'topic="TaskNest"')
    result = await bench.run(init, timeout_seconds=120)
    assert result["ok"] is True and result["exitCode"] == 0, result
    assert json.loads(result["stdout"]) == {"ok": True, "memlog": "@project/ux/.memlog.md", "entries": 0}
    assert "topic: TaskNest" in (bench.project / "ux/.memlog.md").read_text(encoding="utf-8")

    recon = (bench.pkg / "_bmad/core/bmad-deep-recon/references/run.md").read_text(encoding="utf-8")
    slug = _command(recon, "recon_kit.py", "slug").replace('"<topic>"', '"Market size of X"').replace(
        "<type>", "market").replace('--pattern "{workflow.run_folder_pattern}"', "--date 2026-11-27")
    result = await bench.run(slug)
    assert result["ok"] is True and result["exitCode"] == 0, result
    assert "market-size-of-x" in result["stdout"], result
    assert str(bench.pkg) not in str(result) and str(bench.project) not in str(result)
