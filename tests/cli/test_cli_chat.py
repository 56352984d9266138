"""`crewagent chat`: the Agent-First session in a terminal, driven through scripted stdin."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crewagent.cli import chat_cmd
from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.processes import Spawner
from tests.support.scripts import EXAMPLES, STORY_KEY, script_create_story, script_hello_branch
from tests.support.paths import REPO



def feeder(lines: list[str]) -> tuple[list[str], chat_cmd.ReadLine]:
    """A fake stdin: returns the lines in order, then None (end of input); records the prompts."""
    queue: Iterator[str] = iter(lines)
    prompts: list[str] = []

    def read_line(prompt: str) -> str | None:
        prompts.append(prompt)
        return next(queue, None)

    return prompts, read_line


async def test_model_in_the_terminal_reports_switches_and_refuses(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with ScriptedLLM() as llm:
        script_create_story(llm)
        point_at(llm, monkeypatch)
        config = tmp_path / "crewagent.yml"
        config.write_text("models: {default: scripted, allowed: [scripted, scripted-large]}\n")
        out: list[str] = []
        lines = ["*model", "*model nope", "*model scripted-large", "1", "1", STORY_KEY, "*quit"]
        _, read_line = feeder(lines)
        args = argparse.Namespace(
            path=str(EXAMPLES / "create-story-micro"), project=str(project), config=str(config)
        )
        code = await chat_cmd.chat(args, read_line, out.append, lambda _: None)
    text = "\n".join(out)
    assert code == 0
    assert "uses the model `scripted`. Allowed: `scripted`, `scripted-large`" in text
    assert "`nope` is not an allowed model" in text
    assert "Switched to the model `scripted-large`" in text
    assert llm.requests and {r["model"] for r in llm.requests} == {"scripted-large"}


def point_at(llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test")
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")


async def test_chat_picks_agent_and_menu_by_number_and_completes(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with ScriptedLLM() as llm:
        script_create_story(llm)
        point_at(llm, monkeypatch)
        out: list[str] = []
        _, read_line = feeder(["1", "1", STORY_KEY, "*quit", "never used"])
        prompts: list[str] = []
        args = argparse.Namespace(path=str(EXAMPLES / "create-story-micro"), project=str(project))
        code = await chat_cmd.chat(args, read_line, out.append, prompts.append)
    text = "\n".join(out)
    assert code == 0
    assert "1. 🏃 Bob (Scrum Master) [sm]" in text
    assert "1. create-story — Create the next story (micro workflow)" in text
    assert "Which story should I prepare?" in text
    assert "✔ Run complete. Artifacts:" in text and text.count("✔ Run complete") == 1
    assert f"  - artifacts/stories/{STORY_KEY}.md" in text
    assert "  (9 model calls · " in text and " tokens)" in text
    assert (project / "artifacts" / "stories" / f"{STORY_KEY}.md").is_file()
    assert out[-1] == "Bye." and len(prompts) == 4  # "*quit" ended it; the rest was never used
    assert prompts[-1] == "\nrun> " and "never used" not in text
    assert str(project) not in text


async def test_chat_widget_is_answered_by_typing(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async with ScriptedLLM() as llm:
        script_hello_branch(llm)
        point_at(llm, monkeypatch)
        out: list[str] = []
        _, read_line = feeder(["analyst", "hello-branch", "7", "2"])  # 7 is out of range: asked again
        args = argparse.Namespace(path=str(EXAMPLES / "hello-branch"), project=str(project))
        code = await chat_cmd.chat(args, read_line, out.append)
    text = "\n".join(out)
    assert code == 0
    assert "? Is this a new system (greenfield)" in text
    assert "  2. Brownfield — Extend or change an existing system" in text
    assert "Please type a number between 1 and 2." in text
    assert "✔ Run complete" in text and (project / "artifacts" / "plan-brownfield.md").is_file()
    assert out[-1] == "Bye."  # end of input leaves cleanly


async def test_python_m_cli_chat_subprocess(project: Path, tmp_path: Path, spawn: Spawner) -> None:
    async with ScriptedLLM() as llm:
        script_create_story(llm)
        env = {
            **os.environ,
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "test",
            "CREWAGENT_MODEL": "scripted",
            "CREWAGENT_HOME": str(tmp_path / "home"),
        }
        proc = await spawn(
            sys.executable, "-m", "crewagent.cli", "chat", "--project", str(project),  # default package
            cwd=REPO, env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        stdout, stderr = await asyncio.wait_for(proc.communicate(f"sm\ncreate-story\n{STORY_KEY}\n".encode()), 120)
    text = stdout.decode()
    assert proc.returncode == 0, stderr.decode()
    assert "CrewAgent chat: create-story-micro" in text and "✔ Run complete" in text
    assert len(llm.requests) == 9


def test_missing_model_is_a_clear_setup_error(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(path=str(EXAMPLES / "create-story-micro"), project=str(project))
    assert chat_cmd.run(args) == chat_cmd.EXIT_SETUP
    assert "CREWAGENT_MODEL" in capsys.readouterr().err


def test_bad_package_is_a_clear_setup_error(
    project: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "bmad.json").write_text("{not json")
    assert chat_cmd.run(argparse.Namespace(path=str(broken), project=str(project))) == chat_cmd.EXIT_SETUP
    err = capsys.readouterr().err
    assert "invalid" in err and "bmad.json" in err
    missing = argparse.Namespace(path=str(tmp_path / "nope"), project=str(project))
    assert chat_cmd.run(missing) == chat_cmd.EXIT_SETUP
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope'}: no such file or folder\n"
