"""Errors name what was typed, under the usage of the command typed, with the documented exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from crewagent.cli.exit_codes import EXIT_USAGE
from crewagent.cli.main import main
from tests.support.paths import EXAMPLES

NO_MODEL_WORDS = ("CREWAGENT_MODEL", "model")


def _usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


@pytest.mark.parametrize(("argv", "usage"), [
    (["--bogus"], "usage: crewagent [-h]"),
    (["run", "--bogus", "pkg"], "usage: crewagent run [-h]"),
    (["validate", "--bogus"], "usage: crewagent validate [-h]"),  # its PACKAGE is missing too: the flag is said
    (["runs", "show", "--bogus=1", "abc"], "usage: crewagent runs show [-h]"),
    (["import", "bmad", "src", "-o", "x.bmad", "--bogus"], "usage: crewagent import bmad [-h]"),
    (["--bogus", "chat"], "usage: crewagent chat [-h]"),
])
def test_an_unknown_option_is_named_under_the_usage_of_the_command_typed(
        argv: list[str], usage: str, capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(argv, capsys)
    assert err.startswith(usage), err
    bogus = next(word for word in argv if word.startswith("--bogus"))
    assert err.rstrip().endswith(f"error: unrecognized arguments: {bogus}"), err


def test_a_missing_argument_shows_that_commands_usage(capsys: pytest.CaptureFixture[str]) -> None:
    err = _usage_error(["runs", "show"], capsys)
    assert err.startswith("usage: crewagent runs show") and "RUN_ID" in err.splitlines()[-1]


@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_missing_package_is_said_before_the_model_and_as_typed(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # no model configured (the test environment has none)
    assert main([command, "nothing/pkg"]) == EXIT_USAGE
    assert capsys.readouterr().err == "error: nothing/pkg: no such file or folder\n"
    assert main([command, str(tmp_path / "nothing" / "pkg")]) == EXIT_USAGE
    assert capsys.readouterr().err == f"error: {tmp_path / 'nothing' / 'pkg'}: no such file or folder\n"


@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_missing_project_is_said_before_the_model_and_as_typed(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main([command, str(EXAMPLES / "hello-branch"), "--project", "gone/checkout"]) == EXIT_USAGE
    assert capsys.readouterr().err == "error: --project gone/checkout: no such file or folder\n"
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    assert main([command, str(EXAMPLES / "hello-branch"), "--project", "a-file"]) == EXIT_USAGE
    assert capsys.readouterr().err == "error: --project a-file: not a folder\n"


@pytest.mark.parametrize("command", ["run", "chat"])
def test_a_folder_that_is_no_package_is_named_in_full_not_cut_to_its_name(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "team" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert main([command, "team/pkg"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: team/pkg is not a valid package:\n") and "bmad.json" in err
    assert not any(word in err for word in NO_MODEL_WORDS)


def test_the_model_is_asked_for_once_the_package_and_project_are_fine(
        project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(EXAMPLES / "hello-branch"), "--project", str(project)]) == EXIT_USAGE
    assert "CREWAGENT_MODEL" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "chat", "serve"])
def test_a_missing_config_file_is_named_as_typed(
        command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    package = [] if command == "serve" else [str(EXAMPLES / "hello-branch")]
    assert main([command, *package, "--config", "conf/crewagent.yml"]) == EXIT_USAGE
    assert capsys.readouterr().err == "error: --config conf/crewagent.yml: no such file or folder\n"


@pytest.mark.parametrize(("command", "code"), [("validate", 1), ("run", EXIT_USAGE), ("chat", EXIT_USAGE),
                                            ("serve", EXIT_USAGE)])
def test_a_config_error_is_one_line_naming_the_unknown_key_and_the_near_one(
        command: str, code: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "crewagent.yml").write_text("modle: gpt-x\n", encoding="utf-8")
    where = ["crewagent.yml"] if command == "validate" else ["--config", "crewagent.yml"]
    package = [str(EXAMPLES / "hello-branch")] if command in ("run", "chat") else []
    assert main([command, *package, *where]) == code
    err = capsys.readouterr().err
    assert err == f"error: {tmp_path / 'crewagent.yml'}: modle: unknown key; did you mean `model`?\n"


@pytest.mark.parametrize("option", ["--project", "--package"])
def test_serve_names_a_missing_project_or_package_as_typed(
        option: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["serve", option, "gone/x"]) == EXIT_USAGE
    assert capsys.readouterr().err == f"error: {option} gone/x: no such file or folder\n"


@pytest.mark.parametrize("argv", [
    ["validate", "{tmp}/nothing-here"],
    ["validate", "{tmp}/nothing-here.yml"],
    ["pack", "{tmp}/nothing-here", "-o", "{tmp}/x.bmad"],
    ["import", "bmad", "{tmp}/nothing-here", "-o", "{tmp}/x.bmad"],
])
def test_a_missing_path_is_no_such_file_or_folder_everywhere(
        argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([a.format(tmp=tmp_path) for a in argv]) == EXIT_USAGE
    assert capsys.readouterr().err == f"error: {tmp_path / 'nothing-here'}{'.yml' * argv[1].endswith('.yml')}: " \
        "no such file or folder\n"


def test_an_invalid_package_is_named_as_typed_by_validate_and_pack(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "team" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert main(["validate", "team/pkg"]) == 1  # the package has problems: the work failed
    assert "INVALID team/pkg: 1 error" in capsys.readouterr().out
    assert main(["pack", "team/pkg", "-o", "x.bmad"]) == 1
    assert "error: team/pkg was not packed" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["runs", "show", "nope"], ["run", "--resume", "nope"], ["deliver", "nope"]])
def test_a_run_id_that_matches_nothing_is_bad_input(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == EXIT_USAGE
    assert capsys.readouterr().err == "error: No run with id 'nope'. List runs with `crewagent runs list`.\n"


def test_the_exit_code_table_is_in_the_top_level_help_only(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    top = capsys.readouterr().out
    assert top.count("exit codes:") == 1 and "\n  130  stopped with Ctrl-C" in top
    for argv in (["run", "--help"], ["runs", "show", "--help"], ["config", "schema", "--help"]):
        with pytest.raises(SystemExit):
            main(argv)
        text = capsys.readouterr().out
        assert "exit codes: see crewagent --help" in text and "130" not in text, argv
