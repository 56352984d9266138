"""The image's entry point and the compose file, without a Docker engine: the entry point runs with a
stub `crewagent` on PATH that prints the arguments it got; the compose file is checked as YAML."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO

ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
STUB = '#!/bin/sh\nfor word in "$@"; do printf "%s\\n" "$word"; done\n'
WAIT = 30


@pytest.fixture
def image(tmp_path: Path) -> dict[str, str]:
    """The image's layout under tmp_path: packages mounted, a stub crewagent, and the environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stub = bin_dir / "crewagent"
    stub.write_text(STUB, encoding="utf-8")
    stub.chmod(0o755)
    packages = tmp_path / "packages"
    (packages / "team").mkdir(parents=True)
    (packages / "team" / "bmad.json").write_text("{}", encoding="utf-8")
    (packages / "my team").mkdir()
    (packages / "my team" / "bmad.json").write_text("{}", encoding="utf-8")
    (packages / "ops.bmad").write_bytes(b"PK")
    (packages / "notes.txt").write_text("not a package", encoding="utf-8")
    return {
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "CREWAGENT_PROJECT": "/project",
        "CREWAGENT_PACKAGES": str(packages),
        "CREWAGENT_CONFIG_MOUNT": str(tmp_path / "config" / "crewagent.yml"),
    }


def _entrypoint(env: dict[str, str], *args: str) -> list[str]:
    """The arguments the stub crewagent was started with."""
    done = subprocess.run([_posix_sh(), str(ENTRYPOINT), *args], env=env, capture_output=True, text=True,
                          timeout=WAIT, check=True)
    return done.stdout.splitlines()


def _posix_sh() -> str:
    return shutil.which("dash") or "/bin/sh"  # the image's /bin/sh is dash


def test_no_arguments_serve_every_mounted_package(image: dict[str, str]) -> None:
    packages = image["CREWAGENT_PACKAGES"]
    assert _entrypoint(image) == [
        "serve", "--package", f"{packages}/my team", "--package", f"{packages}/ops.bmad",
        "--package", f"{packages}/team",
    ]


def test_extra_flags_are_added_to_the_defaults(image: dict[str, str]) -> None:
    args = _entrypoint(image, "--config", "/c.yml", "--log-format", "json")
    assert args[0] == "serve" and args.count("--package") == 3
    assert args[-4:] == ["--config", "/c.yml", "--log-format", "json"]


def test_a_flag_given_replaces_only_its_own_default(image: dict[str, str]) -> None:
    args = _entrypoint(image, "--package", "/elsewhere/one.bmad", "--project", "/work")
    assert args == ["serve", "--package", "/elsewhere/one.bmad", "--project", "/work"]


def test_a_mounted_config_file_is_passed_unless_one_is_named(image: dict[str, str]) -> None:
    mounted = Path(image["CREWAGENT_CONFIG_MOUNT"])
    mounted.parent.mkdir()
    mounted.write_text("model: x\n", encoding="utf-8")
    assert _entrypoint(image)[-2:] == ["--config", str(mounted)]
    assert _entrypoint(image, "--config=/mine.yml")[-1:] == ["--config=/mine.yml"]
    assert "--config" not in _entrypoint({**image, "CREWAGENT_CONFIG": "/other.yml"})  # serve reads it itself


def test_one_package_folder_mounted_as_packages(image: dict[str, str], tmp_path: Path) -> None:
    single = tmp_path / "single"
    single.mkdir()
    (single / "bmad.json").write_text("{}", encoding="utf-8")
    assert _entrypoint({**image, "CREWAGENT_PACKAGES": str(single)}) == ["serve", "--package", str(single)]


def test_any_other_command_runs_as_given(image: dict[str, str]) -> None:
    assert _entrypoint(image, "crewagent", "validate", "/packages/team.bmad") == ["validate", "/packages/team.bmad"]


def test_serve_honours_crewagent_project_and_crewagent_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from crewagent.cli.main import main

    monkeypatch.setenv("CREWAGENT_PROJECT", str(tmp_path / "no-checkout"))
    assert main(["serve"]) == 2
    assert capsys.readouterr().err == f"error: CREWAGENT_PROJECT {tmp_path / 'no-checkout'}: no such file or folder\n"
    assert main(["serve", "--project", str(tmp_path)]) == 2  # the flag wins: the next problem is the packages
    assert "CREWAGENT_PROJECT" not in capsys.readouterr().err
    monkeypatch.setenv("CREWAGENT_CONFIG", str(tmp_path / "missing.yml"))
    assert main(["serve"]) == 2
    assert capsys.readouterr().err == f"error: CREWAGENT_CONFIG {tmp_path / 'missing.yml'}: no such file or folder\n"


# ---- docker-compose.yml ----------------------------------------------------------------------------


def _compose() -> dict:
    return yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))


def test_compose_restarts_publishes_the_http_port_and_requires_a_project() -> None:
    services = _compose()["services"]
    assert {name: s.get("restart") for name, s in services.items()} == {
        "postgres": "unless-stopped", "crewagent": "unless-stopped"}
    bot = services["crewagent"]
    assert any(str(p).endswith(":3000") for p in bot["ports"])
    project = next(v for v in bot["volumes"] if v.endswith(":/project"))
    assert re.match(r"\$\{PROJECT:\?[^}]*\.env", project), project  # no default: a message naming .env
    assert any(v.endswith(":/config/crewagent.yml:ro") for v in bot["volumes"])


def test_env_example_names_every_variable_the_compose_file_reads() -> None:
    used = set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", (REPO / "docker-compose.yml").read_text(encoding="utf-8")))
    example = (REPO / ".env.example").read_text(encoding="utf-8")
    defined = set(re.findall(r"^([A-Z_][A-Z0-9_]*)=", example, flags=re.MULTILINE))
    assert used <= defined, sorted(used - defined)
