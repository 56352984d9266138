"""`crewagent import bmad`: a short summary in the terminal, archives by suffix, no silent overwrite."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from crewagent.cli.exit_codes import EXIT_USAGE
from crewagent.cli.main import main
from tests.support.bmad_trees import installed_bmad


@pytest.fixture
def team(tmp_path: Path) -> Path:
    installed_bmad(tmp_path / "team")
    return tmp_path / "team"


@pytest.mark.parametrize("name", ["team.zip", "team.bmad", "TEAM.ZIP"])
def test_an_archive_suffix_writes_a_package_archive(name: str, team: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / name
    assert main(["import", "bmad", str(team), "-o", str(out)]) == 0
    assert out.is_file() and zipfile.is_zipfile(out)
    assert "IMPORT-REPORT.md" in zipfile.ZipFile(out).namelist()
    assert f"IMPORT-REPORT.md inside {out}" in capsys.readouterr().out
    assert main(["validate", str(out)]) == 0


def test_an_existing_archive_is_replaced_only_with_force(team: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "team.zip"
    out.write_bytes(b"someone else's file")
    assert main(["import", "bmad", str(team), "-o", str(out)]) == EXIT_USAGE
    assert capsys.readouterr().err == f"error: {out} already exists; add --force to replace it\n"
    assert out.read_bytes() == b"someone else's file"
    assert main(["import", "bmad", str(team), "-o", str(out), "--force"]) == 0
    assert zipfile.is_zipfile(out)


def test_an_output_of_the_wrong_kind_is_refused_even_with_force(team: Path, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "taken.bmad").mkdir()
    assert main(["import", "bmad", str(team), "-o", str(tmp_path / "taken.bmad"), "--force"]) == EXIT_USAGE
    assert "is a folder" in capsys.readouterr().err
    (tmp_path / "notes").write_text("mine\n", encoding="utf-8")
    assert main(["import", "bmad", str(team), "-o", str(tmp_path / "notes"), "--force"]) == EXIT_USAGE
    assert "is a file" in capsys.readouterr().err
    assert (tmp_path / "notes").read_text(encoding="utf-8") == "mine\n"


def test_the_summary_is_short_and_says_what_to_do_next(team: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["import", "bmad", "team", "-o", "pkg"]) == 0
    lines = capsys.readouterr().out.splitlines()
    report = (tmp_path / "pkg" / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert len(lines) < 12 < len(report.splitlines())
    assert lines[0] == "Imported plans 6.0.0-beta.2 from a BMAD installation into pkg"
    assert lines[1].startswith("  1 agent, 3 menu items (1 unavailable), 3 workflows")
    assert any(line.startswith("  unavailable: planner [OL] ") for line in lines)  # the one thing broken, named
    assert "  crewagent chat pkg --project team" in "\n".join(lines)  # an installation is the project
    assert lines[-1] == "The full report (what was mapped, what was left out and why): IMPORT-REPORT.md in pkg"
