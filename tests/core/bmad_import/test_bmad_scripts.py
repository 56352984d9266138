"""BMAD's scripts come along: `crewagent import bmad` carries `scripts/` folders and points the texts at them.

Read on the real BMAD-METHOD trees in ../shared/fixtures (skipped, saying which, when absent).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path

import pytest
from uv import find_uv_bin

from crewagent.core.bmad_import import import_bmad, write_package
from crewagent.core.package.loader import validate_path
from crewagent.core.package.script_deps import ScriptPrepError, prepare_scripts, system_python
from tests.support.shared_files import BMAD_V62_SRC, BMAD_V611_SRC, require

_UV_RUN = re.compile(r"uv run (?:--[\w-]+ )*(@pkg/\S+?\.py)")


@pytest.fixture(scope="module")
def v611(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(BMAD_V611_SRC)
    out = tmp_path_factory.mktemp("v611") / "pkg"
    write_package(import_bmad(BMAD_V611_SRC), out)
    return out


def _texts(package: Path) -> dict[str, str]:
    return {p.relative_to(package).as_posix(): p.read_text(encoding="utf-8") for p in package.rglob("*.md")
            if p.name != "IMPORT-REPORT.md"}


def test_scripts_folders_are_carried_whole_without_their_tests(v611: Path) -> None:
    for rel in ("scripts/memlog.py", "scripts/config_utils.py", "scripts/resolve_config.py",
                "bmm/plan/bmad-sprint-planning/scripts/sprint_plan.py",
                "bmm/ship/bmad-retrospective/scripts/sprint_status.py",
                "core/bmad-deep-recon/scripts/recon_kit.py"):
        source = BMAD_V611_SRC / rel.replace("bmm/", "bmm-skills/", 1).replace("core/", "core-skills/", 1)
        assert (v611 / "_bmad" / rel).read_bytes() == source.read_bytes(), rel  # carried unchanged
    carried = [p.relative_to(v611).as_posix() for p in v611.rglob("*.py")]
    assert len(carried) >= 16 and not [c for c in carried if "/tests/" in c or "__pycache__" in c], carried
    package, problems = validate_path(v611, cache_dir=v611.parent / "cache")
    assert package is not None and not problems, [str(p) for p in problems]


def test_every_script_command_names_a_carried_script_by_its_pkg_path(v611: Path) -> None:
    texts = _texts(v611)
    commands = [(rel, m.group(1)) for rel, text in texts.items() for m in _UV_RUN.finditer(text)]
    assert len(commands) >= 40, "the v6.11 skills call their scripts in many places"
    for rel, alias in commands:
        assert (v611 / alias.removeprefix("@pkg/")).is_file(), f"{rel}: `uv run {alias}` names no carried file"
    for rel, text in texts.items():  # every path form the tree uses was mapped
        assert "{project-root}/_bmad/scripts/" not in text, rel
        assert "{skill-root}/scripts/" not in text, rel
        assert not re.search(r"uv run (?:--[\w-]+ )*scripts/", text), rel
    planning = "\n".join(t for r, t in texts.items() if "bmad-sprint-planning" in r or "sprint-planning" in r)
    assert "uv run @pkg/_bmad/bmm/plan/bmad-sprint-planning/scripts/sprint_plan.py generate" in planning
    recon = "\n".join(t for r, t in texts.items() if "deep-recon" in r)  # a bare `scripts/x.py` in a skill
    assert "uv run @pkg/_bmad/core/bmad-deep-recon/scripts/recon_kit.py tally" in recon
    party = "\n".join(t for r, t in texts.items() if "party-mode" in r)  # `--skill {skill-root}` too
    assert "--skill @pkg/_bmad/core/bmad-party-mode" in party and "{skill-root}" not in party.split("customize")[0]
    retro = texts["_bmad/bmm/ship/bmad-retrospective/SKILL.md"]  # a step that runs scripts says how
    assert "uv run --no-cache @pkg/_bmad/bmm/ship/bmad-retrospective/scripts/sprint_status.py" in retro
    assert retro.startswith("---") and "run with the `shell_run` tool; their dependencies are installed ahead" in retro


def test_the_report_lists_the_scripts_and_what_they_need(v611: Path) -> None:
    report = (v611 / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "(0 unavailable)" in report and "(15 scripts)" in report
    scripts = report.split("## Scripts")[1].split("## Left out")[0]
    assert "- `@pkg/_bmad/bmm/plan/bmad-sprint-planning/scripts/sprint_plan.py` (Python >=3.10, `ruamel.yaml>=0.18`)" \
        in scripts
    assert "- `@pkg/_bmad/scripts/memlog.py` (Python >=3.8)" in scripts
    assert "config_utils.py" not in scripts  # a helper module, carried but not run on its own
    left_out = report.split("## Left out")[1].split("## Files")[0]
    assert "model has no shell" not in left_out and "scripts/memlog.py" not in left_out
    assert "tests/ of 11 scripts folders" in left_out


def test_a_script_whose_metadata_uv_refuses_is_reported_with_the_reason(tmp_path: Path) -> None:
    require(BMAD_V62_SRC)  # v6.2's distillator writes `# /// requires-python = ...` inside its block
    result = import_bmad(BMAD_V62_SRC)
    (line,) = [s for s in result.report.scripts if s.path.endswith("analyze_sources.py")]
    assert line.path == "@pkg/_bmad/core/skills/bmad-distillator/scripts/analyze_sources.py"
    assert "not valid TOML" in line.problem and "/work" not in line.problem
    assert "_bmad/core/skills/bmad-distillator/scripts/analyze_sources.py" in result.files


async def test_an_imported_script_runs_from_the_package_without_network(v611: Path, tmp_path: Path) -> None:
    """BMAD's memlog.py, as the imported texts call it, with the variables a sandbox gets; no index at all."""
    try:
        python = system_python()
    except ScriptPrepError as exc:
        pytest.skip(str(exc))
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "UV_OFFLINE": "1"}
    ready = await prepare_scripts(v611, tmp_path / "cache", timeout=120, python=python, environ=environ)
    assert len(ready.prepared) == 13, ready.problems  # with no index, the two that need ruamel.yaml are not ready
    assert sorted(p.split(":")[0] for p in ready.problems) == [
        "@pkg/_bmad/bmm/plan/bmad-sprint-planning/scripts/sprint_plan.py",
        "@pkg/_bmad/bmm/ship/bmad-retrospective/scripts/sprint_status.py"]
    env = {"PATH": environ["PATH"], "HOME": str(tmp_path), **dict(ready.env), "UV_CACHE_DIR": str(tmp_path / "uvc")}
    command = _UV_RUN.search((v611 / "_bmad/bmm/plan/bmad-ux/SKILL.md").read_text(encoding="utf-8"))
    assert command is not None and command.group(1) == "@pkg/_bmad/scripts/memlog.py"
    script = v611 / command.group(1).removeprefix("@pkg/")
    proc = await asyncio.create_subprocess_exec(find_uv_bin(), "run", str(script), "init", "--workspace", "ws",
                                                "--field", "topic=demo", cwd=tmp_path, env=env,
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                stdin=asyncio.subprocess.DEVNULL, start_new_session=True)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0 and json.loads(out) == {"ok": True, "memlog": "ws/.memlog.md", "entries": 0}, err
    assert "topic: demo" in (tmp_path / "ws/.memlog.md").read_text(encoding="utf-8")


def _installed_project(project: Path) -> Path:
    """A v6.6+ installation: `_bmad/` with the shared scripts, skills in the coding tool's folder."""
    files = {
        "_bmad/config.toml": '[core]\nuser_name = "Ada"\noutput_folder = "{project-root}/out"\n'
                             '[modules.bmm]\nimplementation_artifacts = "{project-root}/out/impl"\n',
        "_bmad/scripts/memlog.py": "# /// script\n# requires-python = \">=3.8\"\n# ///\n"
                                   "from config_utils import VALUE\nif __name__ == '__main__':\n    print(VALUE)\n",
        "_bmad/scripts/config_utils.py": "VALUE = 1\n",
        "_bmad/scripts/tests/test_memlog.py": "def test_x():\n    pass\n",
        ".claude/skills/bmad-agent-sm/SKILL.md": "---\nname: bmad-agent-sm\ndescription: Scrum master\n---\n# Bob\n",
        ".claude/skills/bmad-agent-sm/customize.toml":
            '[agent]\nname = "Bob"\ntitle = "Scrum Master"\nicon = "🏃"\nrole = "Story preparer"\n'
            'identity = "Coach"\ncommunication_style = "Crisp."\nprinciples = ["Clarity."]\n'
            '[[agent.menu]]\ncode = "CS"\ndescription = "Write the next story"\nskill = "bmad-story"\n',
        ".claude/skills/bmad-story/SKILL.md":
            "---\nname: bmad-story\ndescription: Write a story\n---\n# Story\n\n"
            "1. Log: `uv run {project-root}/_bmad/scripts/memlog.py init --workspace {implementation_artifacts}`\n"
            "2. Count: `uv run {skill-root}/scripts/count.py --skill {skill-root}`, or `python3 scripts/count.py`.\n"
            "3. Follow `references/guide.md`.\n",
        ".claude/skills/bmad-story/customize.toml": "[workflow]\nactivation_steps_append = []\n",
        ".claude/skills/bmad-story/references/guide.md": "# Guide\n\nRecount with `uv run scripts/count.py`.\n",
        ".claude/skills/bmad-story/scripts/count.py":
            '# /// script\n# dependencies = ["tinydep>=1.0"]\n# ///\nimport tinydep\n',
    }
    for rel, text in files.items():
        path = project / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return project


def test_an_installation_maps_every_script_path_form_to_the_package(tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    write_package(import_bmad(_installed_project(tmp_path / "project")), out)
    step = (out / "_bmad/skills/bmad-story/SKILL.md").read_text(encoding="utf-8")
    assert "uv run @pkg/_bmad/scripts/memlog.py init --workspace @project/out/impl" in step
    assert "uv run @pkg/_bmad/skills/bmad-story/scripts/count.py --skill @pkg/_bmad/skills/bmad-story`" in step
    assert "`python3 @pkg/_bmad/skills/bmad-story/scripts/count.py`" in step
    guide = (out / "_bmad/skills/bmad-story/references/guide.md").read_text(encoding="utf-8")
    assert "uv run @pkg/_bmad/skills/bmad-story/scripts/count.py" in guide  # carried texts too
    carried = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.py"))
    assert carried == ["_bmad/scripts/config_utils.py", "_bmad/scripts/memlog.py",
                       "_bmad/skills/bmad-story/scripts/count.py"]
    report = (out / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "- `@pkg/_bmad/skills/bmad-story/scripts/count.py` (`tinydep>=1.0`)" in report
    assert "tests/ of 1 scripts folder (scripts)" in report
