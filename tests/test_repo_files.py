"""The files a newcomer meets before any code runs: the README's set-up commands, `.ci/run`, the
Docker files and the skip reasons of tests that need `../shared`. No Docker engine is needed: the
image's entry point is a shell script, run here with a stand-in `crewagent` on PATH."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.support.shared_files import BMAD_V6_SRC, REFERENCE_SCHEMAS, missing_reason
from tests.support.paths import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"
WAIT = 60


def _shell_blocks(text: str) -> list[str]:
    return re.findall(r"```(?:sh|bash)\n(.*?)```", text, flags=re.S)


# ---- set-up commands and CI -------------------------------------------------------------------


def test_the_two_set_up_commands_use_their_own_virtualenvs_and_ci_runs_the_test_one() -> None:
    setup = README[README.index("## Set up"):README.index("## Using it in Slack")]
    serve, tests = [b.strip() for b in _shell_blocks(setup)]
    assert "python3 -m venv .venv &&" in serve and "crewagent serve" in serve
    assert tests == 'python3 -m venv .venv-test && . .venv-test/bin/activate && pip install -e ".[test]" && pytest -q'
    ci_lines = [line for line in (REPO / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    assert ci_lines[-2] == f"{tests} --all"  # .ci/run runs the README's test command with the slow tests,
    assert "`pytest -q --all`" in setup
    assert ci_lines[-1].startswith("mkdocs build --strict")  # then builds the documentation strictly
    ignored = (REPO / ".gitignore").read_text().splitlines()
    assert ".venv/" in ignored and ".venv-test/" in ignored


def test_the_try_out_commands_never_write_into_the_clone() -> None:
    """Runs write artifacts/ into their project: the README points them at a scratch copy."""
    commands = " ".join(_shell_blocks(README)) + " ".join(re.findall(r"`(crewagent [^`]+)`", README))
    assert "--project examples/sample-project" not in commands.replace("\n", " ")
    assert "cp -R examples/sample-project/. /tmp/crew-try/" in README
    assert "crewagent chat examples/create-story-micro --project /tmp/crew-try" in README


def test_no_stray_build_files_are_kept_at_the_root() -> None:
    assert list(REPO.glob("*.whl")) == []
    tracked = subprocess.run(["git", "ls-files", "*.whl"], cwd=REPO, capture_output=True, text=True, timeout=WAIT)
    if tracked.returncode == 0:  # a git checkout (an unpacked archive has no history to ask)
        assert tracked.stdout == ""


def test_the_docs_document_the_exit_codes_and_the_readme_why_some_tests_skip() -> None:
    command_line = (REPO / "docs" / "command-line.md").read_text(encoding="utf-8")
    for row in ("| 0 | done", "| 1 | the work failed: the run failed, or the package or configuration has problems",
                "| 2 | usage or bad input", "| 3 | input ended", "| 130 | Ctrl-C",
                "| 141 | the reader of the output went away"):
        assert row in command_line, row
    assert "`../shared` (beside the checkout) are skipped, saying so" in README.replace("\n", " ")


# ---- Docker ----------------------------------------------------------------------------------------------


def test_dockerignore_keeps_environments_history_caches_and_output_out() -> None:
    patterns = [p for p in (REPO / ".dockerignore").read_text().splitlines() if p and not p.startswith("#")]
    for needed in (".venv*", ".git", "**/__pycache__", ".pytest_cache", "*.egg-info", "artifacts"):
        assert needed in patterns, needed
    copied = re.findall(r"^COPY (\S+)", (REPO / "Dockerfile").read_text(), flags=re.M)
    for source in copied:  # nothing the image copies is ignored
        assert source.split("/")[0] not in patterns, source


def test_the_image_starts_through_the_entry_point_with_the_package_folder_set() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "COPY docker/entrypoint.sh /usr/local/bin/crewagent-entrypoint" in dockerfile
    assert 'ENTRYPOINT ["sh", "/usr/local/bin/crewagent-entrypoint"]' in dockerfile
    assert "CREWAGENT_PACKAGES=/packages" in dockerfile and "CREWAGENT_PROJECT=/project" in dockerfile
    assert "\nCMD " not in dockerfile  # the entry point decides; arguments given to `docker run` still win


@pytest.fixture
def entrypoint(tmp_path: Path):
    """Run docker/entrypoint.sh with a stand-in `crewagent` that prints the arguments it was given."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "crewagent"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n', encoding="utf-8")
    fake.chmod(0o755)
    sh = shutil.which("sh")
    assert sh is not None

    def run(*args: str, packages: Path | None = None) -> list[str]:
        env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CREWAGENT_PROJECT": "/project",
               "CREWAGENT_PACKAGES": str(packages or tmp_path / "no-packages")}
        done = subprocess.run([sh, str(ENTRYPOINT), *args], env=env, capture_output=True, text=True, timeout=WAIT)
        assert done.returncode == 0, done.stderr
        return done.stdout.splitlines()

    return run


def test_the_entry_point_serves_every_mounted_package(entrypoint, tmp_path: Path) -> None:
    packages = tmp_path / "packages"
    (packages / "team-pkg").mkdir(parents=True)
    (packages / "team-pkg" / "bmad.json").write_text("{}")
    (packages / "team.bmad").write_bytes(b"PK")
    (packages / "notes.txt").write_text("not a package")
    (packages / "empty-folder").mkdir()
    # the project is CREWAGENT_PROJECT, which serve reads itself
    assert entrypoint(packages=packages) == [
        "serve", "--package", str(packages / "team-pkg"), "--package", str(packages / "team.bmad"),
    ]
    single = tmp_path / "one-package"
    single.mkdir()
    (single / "bmad.json").write_text("{}")
    assert entrypoint(packages=single) == ["serve", "--package", str(single)]
    # nothing mounted: serve offers the bundled examples (it finds ./examples in the image's /app)
    assert entrypoint() == ["serve"]


def test_the_entry_point_passes_flags_to_serve_and_runs_commands(entrypoint) -> None:
    assert entrypoint("--project", "/x", "--port", "8080") == ["serve", "--project", "/x", "--port", "8080"]
    assert entrypoint("crewagent", "validate", "/packages/team.bmad") == ["validate", "/packages/team.bmad"]


def test_compose_defaults_point_at_folders_that_exist() -> None:
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    volumes = compose["services"]["crewagent"]["volumes"]
    mounts = {}
    for volume in volumes:
        found = re.fullmatch(r"\$\{\w+:-([^}]+)\}:(/[\w/.]+)(?::ro)?", volume.split("#")[0].strip())
        if found:  # a mount with a default (PROJECT has none: compose stops, naming it)
            source, target = found.groups()
            mounts[target] = source
    assert set(mounts) == {"/packages", "/config/crewagent.yml"}
    assert (REPO / mounts["/packages"] / "create-story-micro" / "bmad.json").is_file()
    assert mounts["/config/crewagent.yml"] == "/dev/null"  # no config file: the entry point passes none


# ---- tests that need ../shared ----------------------------------------------------------------------------


def test_skip_reasons_say_what_is_missing_and_that_the_rest_does_not_need_it() -> None:
    reason = missing_reason(BMAD_V6_SRC)
    assert reason == ("BMAD-METHOD v6.0.0 fixture not found at ../shared/fixtures/bmad-method-v6.0.0/src: "
                      "the importer's and router's real-tree tests need it; the rest of the suite does not")
    assert missing_reason(REFERENCE_SCHEMAS).startswith(
        "public .bmad v1.1 reference schemas not found at ../shared/spec/reference-schemas-v1.1: ")


def test_a_checkout_without_shared_skips_those_tests_with_that_reason(tmp_path: Path) -> None:
    """A copy of the project with no `shared` folder beside it: the tests that read it skip, saying why."""
    checkout = tmp_path / "checkout"
    for part in ("core", "cli", "bot", "tests", "examples", "pyproject.toml"):
        source = REPO / part
        if source.is_dir():
            shutil.copytree(source, checkout / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, checkout / part)
    assert not (tmp_path / "shared").exists()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
         "tests/core/package/test_package_schemas.py", "tests/core/session/test_router.py",
         "tests/core/bmad_import/test_bmad_import.py", "-k",
         "schema or pm or bmm or real"],
        cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)}, capture_output=True, text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skipped, done.stdout[-3000:]
    for line in skipped:
        assert "not found at ../shared/" in line and "the rest of the suite does not" in line, line


# ---- the README and the documentation site ---------------------------------------------------------------


def test_the_readme_fits_on_a_few_screens_and_its_links_lead_somewhere() -> None:
    assert len(README.splitlines()) <= 250
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if "://" not in t]
    assert "docs/images/thread.png" in local and "docs/configuration.md" in local
    for target in local:
        assert (REPO / target).exists(), target
    assert (REPO / "docs" / "images" / "thread.png").stat().st_size < 200_000
    nav = (REPO / "mkdocs.yml").read_text(encoding="utf-8")
    for page in re.findall(r"\(docs/([\w-]+\.md)\)", README):  # every page the README names is in the site
        assert f": {page}" in nav, page
    assert "\n## When Slack or the database goes away\n" in README
