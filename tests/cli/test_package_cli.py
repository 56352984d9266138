"""`crewagent validate` and `crewagent pack` as a user runs them: exit codes and exactly what is printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from crewagent.cli.main import main
from tests.support.package_files import edit_json, make_package
from tests.support.paths import EXAMPLES


@pytest.mark.parametrize(
    "example, line",
    [
        ("create-story-micro", "OK create-story-micro 0.1.0: 1 workflow, 2 agents, 6 nodes"),
        ("hello-branch", "OK hello-branch 0.1.0: 1 workflow, 4 agents, 5 nodes"),
        ("multi-workflows", "OK multi-workflows 0.1.0: 2 workflows, 4 agents, 8 nodes"),
    ],
)
def test_validate_examples(capsys: pytest.CaptureFixture[str], example: str, line: str) -> None:
    assert main(["validate", str(EXAMPLES / example)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [line] and err == ""


def test_validate_prints_warnings_below_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_package(tmp_path / "mini")
    edit_json(root / "workflow.graph.json", lambda g: g["edges"].pop(2))
    assert main(["validate", str(root)]) == 0
    out, _ = capsys.readouterr()
    assert out.splitlines() == [
        "OK mini 1.0.0: 1 workflow, 2 agents, 5 nodes",
        "warning: workflow.graph.json: $.nodes[1]: decision node 'decide-02' has 1 outgoing edge(s) "
        "(fix: give a decision node at least two outgoing edges, one with isDefault: true)",
    ]


def test_validate_lists_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_package(tmp_path / "mini")
    edit_json(root / "bmad.json", lambda m: m.update(schemaVersion="2.0"))
    edit_json(root / "agents.json", lambda d: d["agents"][0]["menu"][1].update(workflow="missing"))
    assert main(["validate", str(root)]) == 1
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines == [
        'bmad.json: $.schemaVersion: "2.0" has the wrong format (fix: use "1.1")',
        "agents.json: $.agents[0].menu[1].workflow: workflow 'missing' is neither a workflow id (mini) nor a "
        "workflow.md listed in bmad.json (workflow.md) (fix: use one of those ids or paths)",
        f"INVALID {root}: 2 errors",
    ]
    assert "Traceback" not in out + err and str(tmp_path) not in "\n".join(lines[:-1])  # problems: package-relative


def test_validate_classic_package(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "classic").mkdir()
    (tmp_path / "classic" / "workflow.yaml").write_text("name: x\n", encoding="utf-8")
    assert main(["validate", str(tmp_path / "classic")]) == 1
    out, _ = capsys.readouterr()
    assert out.startswith("workflow.yaml: this is a classic BMAD workflow")


def test_validate_missing_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "nothing.bmad")]) == 2  # bad input: nothing there (2), unlike a package with problems (1)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [f"error: {tmp_path / 'nothing.bmad'}: no such file or folder"]


def test_validate_unreadable_zip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "broken.bmad").write_bytes(b"PK\x03\x04 not really")
    assert main(["validate", str(tmp_path / "broken.bmad")]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    [line] = err.splitlines()
    assert line.startswith("error: broken.bmad: not a readable zip archive")


def test_pack_then_validate_the_archive(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_file = tmp_path / "dist" / "hello-branch.bmad"
    assert main(["pack", str(EXAMPLES / "hello-branch"), "-o", str(out_file)]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"{out_file} ({out_file.stat().st_size} bytes)"] and err == ""
    assert main(["validate", str(out_file)]) == 0
    assert capsys.readouterr().out.splitlines() == ["OK hello-branch 0.1.0: 1 workflow, 4 agents, 5 nodes"]


def test_pack_refuses_a_broken_package(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = make_package(tmp_path / "mini")
    (root / "steps" / "end-99.md").unlink()
    out_file = tmp_path / "mini.bmad"
    assert main(["pack", str(root), "-o", str(out_file)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "workflow.graph.json: $.nodes[4].file: step file 'steps/end-99.md' of node 'end-99' does not exist "
        "(fix: add the file, or correct the path (relative to the package root))",
        f"error: {root} was not packed: 1 error(s)",
    ]
    assert not out_file.exists()


def test_pack_needs_a_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pack", str(tmp_path / "absent"), "-o", str(tmp_path / "x.bmad")]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: {tmp_path / 'absent'}: no such file or folder"]
