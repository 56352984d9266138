"""BMAD scripts' PEP 723 metadata, and their dependencies made ready so `uv run` works with no network.

The dependency is a wheel the test writes (tests/support/wheels.py), offered through a local folder:
the tests never reach an index. "Offline" is uv's own switch (UV_OFFLINE=1) plus the source folder
deleted before the run, so the script can only get its dependency from the prepared
wheel folder.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path

import pytest
from uv import find_uv_bin

from crewagent.core.package.script_deps import (
    SANDBOX_WHEELS, ScriptsPreparer, ScriptsReady, prepare_scripts, scripts_sandbox_extras, scripts_ready,
    system_python,
)
from crewagent.core.package.script_metadata import ScriptMetadata, ScriptMetadataError, parse_script_metadata
from tests.support.wheels import write_wheel

PLAIN = "# /// script\n# requires-python = '>=3.8'\n# ///\nprint('plain')\n"
GOOD = '''#!/usr/bin/env python3
# /// script
# requires-python = ">=3.8"
# dependencies = [
#   "tinydep>=1.0",  # a comment inside the TOML
# ]
# ///
"""Says hello with its dependency."""
import tinydep
print(tinydep.GREETING)
'''


# ---- PEP 723 -------------------------------------------------------------------------------------


def test_metadata_is_read_with_a_real_toml_parser() -> None:
    meta = parse_script_metadata(GOOD)
    assert meta == ScriptMetadata(dependencies=("tinydep>=1.0",), requires_python=">=3.8")
    assert parse_script_metadata("# /// script\n# requires-python = '>=3.11'\n# ///\nprint(1)\n") == \
        ScriptMetadata(requires_python=">=3.11")
    other = "# /// pyproject\n# [tool.x]\n# a = 1\n# ///\n"  # another block type is not the script's
    assert parse_script_metadata(other) is None


def test_a_script_without_a_block_has_no_metadata() -> None:
    assert parse_script_metadata("import sys\nprint(sys.argv)\n") is None
    assert parse_script_metadata('"""# /// script is only mentioned here."""\n') is None


@pytest.mark.parametrize(("text", "reason"), [
    # BMAD v6.2's distillator wrote its keys behind `# ///`: uv refuses that block too
    ("# /// script\n# /// requires-python = \">=3.10\"\n# /// dependencies = []\n# ///\n", "not valid TOML"),
    ("# /// script\n# dependencies = [\"a\"\n# ///\n", "not valid TOML"),
    ("# /// script\n# dependencies = [\"a\"]\nprint(1)\n", "never ends"),
    ("# /// script\n# dependencies = []\n# ///\nimport a\n# /// script\n# dependencies = []\n# ///\n", "more than one"),
    ("# /// script\n# dependencies = \"requests\"\n# ///\n", "wrong `dependencies`"),
    ("# /// script\n# dependencies = [1]\n# ///\n", "wrong `dependencies.0`"),
    ("# /// script\n# requires-python = 3.11\n# ///\n", "wrong `requires-python`"),
])
def test_a_malformed_block_is_refused_with_the_reason(text: str, reason: str) -> None:
    with pytest.raises(ScriptMetadataError, match=reason.replace("(", r"\(")):
        parse_script_metadata(text)


# ---- preparation ----------------------------------------------------------------------------------


@pytest.fixture
def python() -> str:
    try:
        return system_python()
    except Exception as exc:  # noqa: BLE001 - the message says which interpreter is missing
        pytest.skip(str(exc))


def _package(root: Path, scripts: dict[str, str]) -> Path:
    for rel, text in scripts.items():
        path = root / "_bmad" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def _local_index(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder holding `tinydep`, and an environment whose uv sees only that folder."""
    source = tmp_path / "source-wheels"
    write_wheel(source, "tinydep", "1.0", 'GREETING = "hello from tinydep"\n')
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path / "home"),
               "UV_OFFLINE": "1", "UV_FIND_LINKS": str(source)}
    return source, environ


async def _uv_run(ready: ScriptsReady, script: Path, cwd: Path, *extra: str) -> tuple[int, str, str]:
    """`uv run <script>` with exactly the environment a sandbox gets (plus PATH and HOME), nothing else."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(cwd), **dict(ready.env)}
    env["UV_CACHE_DIR"] = str(cwd / "private-uv-cache")  # the sandbox's private /tmp
    proc = await asyncio.create_subprocess_exec(find_uv_bin(), "run", *extra, str(script), cwd=cwd, env=env,
                                                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE, start_new_session=True)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_dependencies_are_ready_and_the_script_runs_offline(tmp_path: Path, python: str) -> None:
    pkg = _package(tmp_path / "pkg", {"bmm/skill/scripts/hello.py": GOOD,
                                      "scripts/plain.py": PLAIN,
                                      "scripts/helper.py": "VALUE = 1\n"})
    source, environ = _local_index(tmp_path)
    cache = tmp_path / "cache"
    ready = await prepare_scripts(pkg, cache, timeout=60, python=python, environ=environ,
                                  wheels_mount=str(cache / "wheels"))  # no sandbox: the folder is where it is
    assert ready.ok, ready.problems
    assert ready.prepared == ("@pkg/_bmad/bmm/skill/scripts/hello.py", "@pkg/_bmad/scripts/plain.py")
    assert ready.read_only == ((str(cache / "wheels"), str(cache / "wheels")),)
    env = dict(ready.env)
    assert (env["UV_OFFLINE"], env["UV_PYTHON_DOWNLOADS"], env["UV_PYTHON"]) == ("1", "never", python)
    assert [w.name for w in (cache / "wheels").iterdir()] == ["tinydep-1.0-py3-none-any.whl"]

    shutil.rmtree(source)  # from here on, the prepared folder is the only place tinydep exists
    work = tmp_path / "work"
    work.mkdir()
    code, out, err = await _uv_run(ready, pkg / "_bmad/bmm/skill/scripts/hello.py", work)
    assert (code, out) == (0, "hello from tinydep\n"), err
    code, out, err = await _uv_run(ready, pkg / "_bmad/bmm/skill/scripts/hello.py", work, "--no-cache")
    assert (code, out) == (0, "hello from tinydep\n"), err  # BMAD's retrospective runs `uv run --no-cache`
    code, out, err = await _uv_run(ready, pkg / "_bmad/scripts/plain.py", work)
    assert (code, out) == (0, "plain\n"), err

    again = await prepare_scripts(pkg, cache, timeout=60, python=python, environ=environ,
                                  wheels_mount=str(cache / "wheels"))
    assert again.ok and again.prepared == ready.prepared  # ready by its metadata hash: no index asked again


async def test_a_script_that_cannot_be_prepared_is_one_line_without_host_paths(
        tmp_path: Path, python: str, caplog: pytest.LogCaptureFixture) -> None:
    missing = GOOD.replace("tinydep>=1.0", "nosuchdep")
    too_new = "# /// script\n# requires-python = '>=9.0'\n# ///\nprint(1)\n"
    broken = "# /// script\n# /// requires-python = '>=3.10'\n# ///\n"
    pkg = _package(tmp_path / "pkg", {"scripts/good.py": GOOD, "scripts/missing.py": missing,
                                      "scripts/too_new.py": too_new, "scripts/broken.py": broken})
    _, environ = _local_index(tmp_path)
    with caplog.at_level(logging.WARNING, logger="crewagent.core.package.script_deps"):
        ready = await prepare_scripts(pkg, tmp_path / "cache", timeout=60, python=python, environ=environ)
    assert ready.prepared == ("@pkg/_bmad/scripts/good.py",)
    problems = dict(p.split(": ", 1) for p in ready.problems)
    assert set(problems) == {"@pkg/_bmad/scripts/broken.py", "@pkg/_bmad/scripts/missing.py",
                             "@pkg/_bmad/scripts/too_new.py"}
    assert "not valid TOML" in problems["@pkg/_bmad/scripts/broken.py"]
    assert problems["@pkg/_bmad/scripts/missing.py"].startswith("its dependencies could not be resolved")
    assert "needs Python >=9.0" in problems["@pkg/_bmad/scripts/too_new.py"]
    for line in ready.problems:
        assert str(tmp_path) not in line and "/tmp" not in line, line
    logged = [r.getMessage() for r in caplog.records]
    assert any("missing.py" in m and "not ready" in m for m in logged), logged


async def test_preparation_is_bounded_by_its_timeout(tmp_path: Path, python: str) -> None:
    pkg = _package(tmp_path / "pkg", {"scripts/good.py": GOOD})
    _, environ = _local_index(tmp_path)
    ready = await prepare_scripts(pkg, tmp_path / "cache", timeout=0, python=python, environ=environ)
    assert ready.problems == ("@pkg/_bmad/scripts/good.py: preparing the scripts took longer than allowed "
                              "(see `timeout`)",)


async def test_the_preparer_works_once_per_package_version(tmp_path: Path, python: str) -> None:
    pkg = _package(tmp_path / "pkg", {"scripts/good.py": GOOD})
    source, environ = _local_index(tmp_path)
    cache = tmp_path / "cache"
    preparer = ScriptsPreparer(cache, timeout=60, python=python, environ=environ)
    binds, env = scripts_sandbox_extras(cache, python)  # known before any preparation: set at start-up
    assert binds == ((str(cache / "wheels"), SANDBOX_WHEELS),) and dict(env)["UV_FIND_LINKS"] == SANDBOX_WHEELS
    preparer.warm([(pkg, "1.0.0")])
    first, second = await asyncio.gather(preparer.prepare(pkg, "1.0.0"), preparer.prepare(pkg, "1.0.0"))
    assert first is second and first.prepared == ("@pkg/_bmad/scripts/good.py",)
    shutil.rmtree(source)
    assert await preparer.prepare(pkg, "1.0.0") is first  # the same version is not prepared again
    newer = await preparer.prepare(pkg, "1.0.1")  # a new version is looked at, and finds its wheels ready
    assert newer is not first and newer.ok
    await preparer.aclose()


async def test_without_the_scripts_python_every_script_says_so(tmp_path: Path,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    pkg = _package(tmp_path / "pkg", {"scripts/good.py": GOOD, "scripts/plain.py": PLAIN})
    _, environ = _local_index(tmp_path)
    with caplog.at_level(logging.WARNING, logger="crewagent.core.package.script_deps"):
        ready = await prepare_scripts(pkg, tmp_path / "cache", timeout=30, python=str(tmp_path / "no-python"),
                                      environ=environ)
    assert ready.prepared == () and len(ready.problems) == 2
    assert all("`no-python` could not be started" in p and str(tmp_path) not in p for p in ready.problems)
    assert [r.getMessage() for r in caplog.records] == [
        "scripts of package pkg not prepared: `no-python` could not be started (No such file or directory)"]


async def test_a_command_waits_for_its_package_preparation(tmp_path: Path, python: str) -> None:
    pkg = _package(tmp_path / "pkg", {"scripts/good.py": GOOD})
    _, environ = _local_index(tmp_path)
    assert await scripts_ready(pkg, timeout=5) is None  # nothing started for this package: nothing to wait for
    preparer = ScriptsPreparer(tmp_path / "cache", timeout=60, python=python, environ=environ)
    preparer.warm([(pkg, "1.0.0")])
    ready = await scripts_ready(pkg, timeout=60)  # what shell_run awaits before it starts the sandbox
    assert ready is not None and ready.prepared == ("@pkg/_bmad/scripts/good.py",)
    assert await preparer.prepare(pkg, "1.0.0") is ready
    await preparer.aclose()
