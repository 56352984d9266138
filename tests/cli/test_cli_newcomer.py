"""What a new user trips on in the terminal: help, where a run writes, BMAD trees, exit codes, file
modes, closed pipes and the wording of model errors. Real `crewagent` processes (or its main())
against the scripted model."""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from crewagent.cli.main import build_parser, main
from crewagent.core.base.errors import CrewError
from crewagent.core.model.client import LLMClient, LLMSettings
from tests.support.bmad_trees import installed_bmad
from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.processes import kill_group
from tests.support.scripts import EXAMPLES, hello_branch_responder
from tests.support.cli_driver import WAIT, crewagent, model_env

REPO = EXAMPLES.parent
JARGON = ("Workflow-First", "Agent-First")


def _subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield (*prefix, name), sub
                yield from _subcommands(sub, (*prefix, name))


def _run(*args: str, cwd: Path = REPO, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real command line (`python -m cli`, what the `crewagent` script runs), bounded in time."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "crewagent.cli", *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=WAIT, start_new_session=True)


# ---- --help ----------------------------------------------------------------------------------------


def test_top_level_help_is_plain_and_lists_every_command_and_the_exit_codes() -> None:
    done = _run("--help")
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert not any(word in text for word in JARGON)
    for command in ("serve", "chat", "run", "validate", "pack", "import", "runs", "deliver", "migrate"):
        assert f"\n    {command} " in text, command
    assert "exit codes:" in text and "\n  2    usage or bad input" in text and "\n  1    the work failed" in text


def test_every_subcommand_has_a_description_and_every_argument_has_help(
        capsys: pytest.CaptureFixture[str]) -> None:
    commands = list(_subcommands(build_parser()))
    assert len(commands) >= 12  # serve … import, runs list/show, import bmad
    for path, parser in commands:
        assert parser.description and len(parser.description) > 30, path
        for action in parser._actions:
            if not action.option_strings and not isinstance(action, argparse._SubParsersAction):
                assert action.help, f"{' '.join(path)}: {action.dest} has no help"
        with pytest.raises(SystemExit) as exit_:
            main([*path, "--help"])
        assert exit_.value.code == 0
        text = capsys.readouterr().out
        assert parser.description.split()[0] in text, path
        assert "exit codes: see crewagent --help" in text and "130" not in text, path  # the table is said once
        assert not any(word in text for word in JARGON), path


# ---- where a run writes ----------------------------------------------------------------------------


@pytest.mark.slow  # the command line as a process, end to end
async def test_run_without_project_says_it_writes_in_the_current_directory(project: Path, tmp_path: Path) -> None:
    async with ScriptedLLM(responder=hello_branch_responder(preset_branch="greenfield")) as llm:
        env = model_env(llm, tmp_path / "home")
        async with crewagent(env, "run", str(EXAMPLES / "hello-branch"), cwd=project) as cli:
            first = await cli.until("Files are written in")
            await cli.close_input()
            code, out = await cli.finish()
        assert code == 0, out
        assert first == (f"Files are written in {project.resolve()} (the current directory; "
                         "pass --project DIR to work in another folder).")
        assert out.index("Files are written in") < out.index("Starting run")  # said before it starts
        assert (project / "artifacts").is_dir()

        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        async with crewagent(env, "run", str(EXAMPLES / "hello-branch"), "--project", str(project),
                             cwd=elsewhere) as cli:
            first = await cli.until("Files are written in")
            await cli.close_input()
            code, out = await cli.finish()
        assert code == 0, out
        assert first == f"Files are written in {project.resolve()}."
        assert list(elsewhere.iterdir()) == []  # nothing lands in the current directory


# ---- BMAD trees are imported, not validated -----------------------------------------------------------


def _source_tree(root: Path) -> Path:
    """The shape of a BMAD-METHOD `src/`: module folders with a module.yaml."""
    for module in ("core", "bmm"):
        (root / module / "agents").mkdir(parents=True)
        (root / module / "module.yaml").write_text(f"code: {module}\n", encoding="utf-8")
    return root


@pytest.mark.slow  # the command line as a process, end to end
@pytest.mark.parametrize("kind", ["source tree", "installed _bmad", "project holding _bmad"])
def test_a_bmad_tree_gets_the_import_command_not_add_bmad_json(kind: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    if kind == "source tree":
        tree = _source_tree(tmp_path / "BMAD-METHOD" / "src")
    else:
        bmad = installed_bmad(tmp_path / "team-project")
        tree = bmad if kind == "installed _bmad" else bmad.parent
    for args, code in ((["validate", str(tree)], 1), (["run", str(tree)], 2), (["chat", str(tree)], 2),
                       (["pack", str(tree), "-o", str(tmp_path / "x.bmad")], 1)):
        done = _run(*args, env={"CREWAGENT_MODEL": "scripted", "CREWAGENT_HOME": str(tmp_path / "home")})
        assert done.returncode == code, (args, done.stdout, done.stderr)
        text = done.stdout + done.stderr
        assert "add bmad.json" not in text and "Traceback" not in text, args
        assert "not a .bmad package" in done.stderr, args
        assert f"crewagent import bmad {tree} -o " in done.stderr, args
    if kind != "source tree":  # the advice works as printed
        command = next(line.split() for line in done.stderr.splitlines() if "crewagent import bmad" in line)
        out = tmp_path / command[-1]
        assert main([*command[1:-1], str(out)]) == 0
        assert main(["validate", str(out)]) == 0


@pytest.mark.parametrize("args", [
    ["validate", "{missing}"],
    ["pack", "{missing}", "-o", "{tmp}/x.bmad"],
    ["import", "bmad", "{missing}", "-o", "{tmp}/x.bmad"],
    ["run", "{missing}"],
    ["chat", "{missing}"],
])
def test_a_path_that_is_not_there_is_exit_2_for_every_command(args: list[str], tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    argv = [a.format(missing=tmp_path / "nothing-here", tmp=tmp_path) for a in args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "nothing-here" in err and err.startswith("error: ")


# ---- files and pipes -----------------------------------------------------------------------------------


@contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


@pytest.mark.parametrize(("mask", "mode"), [(0o002, 0o664), (0o022, 0o644), (0o077, 0o600)])
def test_written_bmad_files_follow_the_umask(mask: int, mode: int, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    installed_bmad(tmp_path / "team")
    with umask(mask):
        assert main(["pack", str(EXAMPLES / "hello-branch"), "-o", str(tmp_path / "packed.bmad")]) == 0
        assert main(["import", "bmad", str(tmp_path / "team"), "-o", str(tmp_path / "imported.bmad")]) == 0
    for name in ("packed.bmad", "imported.bmad"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == mode, name


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """`crewagent import … | head`: the reader closes the pipe before the report is printed."""
    installed_bmad(tmp_path / "team")
    env = {**os.environ, "PYTHONPATH": str(REPO), "CREWAGENT_HOME": str(tmp_path / "home")}
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes a byte
    proc = subprocess.Popen(
        [sys.executable, "-m", "crewagent.cli", "import", "bmad", str(tmp_path / "team"), "-o", str(tmp_path / "t.bmad")],
        cwd=REPO, env=env, stdout=write_end, stderr=subprocess.PIPE, start_new_session=True,
    )
    os.close(write_end)
    try:
        _, err = proc.communicate(timeout=WAIT)
    finally:
        kill_group(proc.pid)
    assert err.decode() == ""  # no BrokenPipeError, no "Exception ignored"
    assert proc.returncode == 141  # what a shell reports for any tool whose reader went away
    assert (tmp_path / "t.bmad").is_file()  # the work itself was done


# ---- model errors in the terminal's words --------------------------------------------------------------


async def test_a_refused_credential_names_the_setting_in_the_terminal_and_not_in_slack(
        project: Path, tmp_path: Path) -> None:
    async with ScriptedLLM() as llm:
        llm.add_error(401, {"error": {"message": "Incorrect API key provided"}})
        async with crewagent(model_env(llm, tmp_path / "home"), "run", str(EXAMPLES / "hello-branch"),
                             "--project", str(project)) as cli:
            await cli.close_input()
            code, out = await cli.finish()
        assert code == 1
        assert "The model service refused the credentials." in out and "check OPENAI_API_KEY" in out
        assert "Tell whoever runs the bot" not in out and "this bot's" not in out

        llm.add_error(401, {"error": {"message": "Incorrect API key provided"}})
        bot_client = LLMClient(LLMSettings(model="m", base_url=llm.base_url, api_key="k", max_retries=0))
        try:
            with pytest.raises(CrewError) as refused:
                await asyncio.wait_for(bot_client.complete([{"role": "user", "content": "hi"}]), WAIT)
        finally:
            await bot_client.aclose()
    assert refused.value.message == "The model service refused this bot's credentials. Tell whoever runs the bot."


@pytest.mark.slow  # the command line as a process, end to end
async def test_an_unreachable_model_is_said_once_per_attempt_without_repeating_itself(
        project: Path, tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on: the connection is refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SLACK_", "CREWAGENT_"))}
    env.update(OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1", OPENAI_API_KEY="k", CREWAGENT_MODEL="m",
               CREWAGENT_LLM_RETRIES="1", CREWAGENT_HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO))
    async with crewagent(env, "run", str(EXAMPLES / "hello-branch"), "--project", str(project)) as cli:
        await cli.close_input()
        code, out = await cli.finish()
    assert code == 1
    assert "  … The model did not answer (connection failed or timed out); trying again (attempt 2 of 2)…" in out
    assert "no answer" not in out
    assert out.count("could not be reached") == 1 and "check OPENAI_BASE_URL" in out
