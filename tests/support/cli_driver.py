"""Ways to drive the `crewagent` CLI from a test: in-process through its entry points, or as a real process."""

from __future__ import annotations

import argparse
import asyncio
import io
import logging
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from crewagent.cli import chat_cmd
from crewagent.cli.main import main
from tests.support.fakes.llm_server import ScriptedLLM
from tests.support.paths import EXAMPLES, REPO
from tests.support.processes import Spawner, kill_group

STORY = EXAMPLES / "create-story-micro"
WAIT = 30  # seconds: an upper bound for events on a loaded machine, never a guessed delay


async def cli(argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
              ) -> tuple[int, str, str]:
    """Run the CLI in a worker thread (it owns its own event loop) with `stdin` as input.

    Root log handlers left behind by other tests (bound to a closed capture stream) are set aside.
    """
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    code = await asyncio.to_thread(main, argv)
    out, err = capsys.readouterr()
    return code, out, err


def model_env(llm: ScriptedLLM, home: Path) -> dict[str, str]:
    """A clean environment (no OPENAI_/SLACK_/CREWAGENT_ leaks) for a `crewagent` process on the scripted model."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SLACK_", "CREWAGENT_"))}
    env.update(OPENAI_BASE_URL=llm.base_url, OPENAI_API_KEY="test", CREWAGENT_MODEL="scripted",
               CREWAGENT_HOME=str(home), PYTHONPATH=str(REPO))
    return env


class Cli:
    """A `python -m cli ...` process in its own process group, read line by line as it prints."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []

    async def type(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text.encode())
        await self.proc.stdin.drain()

    async def close_input(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()

    async def until(self, marker: str) -> str:
        """Read output until a line contains `marker`; returns that line."""
        assert self.proc.stdout is not None
        async with asyncio.timeout(WAIT):
            while True:
                raw = await self.proc.stdout.readline()
                if not raw:
                    raise AssertionError(f"output ended before {marker!r}:\n" + "\n".join(self.lines))
                line = raw.decode().rstrip("\n")
                self.lines.append(line)
                if marker in line:
                    return line

    async def finish(self) -> tuple[int, str]:
        assert self.proc.stdout is not None
        rest, err = await asyncio.wait_for(self.proc.communicate(), WAIT)
        self.lines += rest.decode().splitlines()
        assert "Traceback" not in err.decode(), err.decode()
        return self.proc.returncode or 0, "\n".join(self.lines)


@asynccontextmanager
async def crewagent(env: dict[str, str], *args: str, cwd: Path = REPO) -> AsyncIterator[Cli]:
    """A `python -m cli ARGS` process to talk to; its whole process group is killed on exit."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crewagent.cli", *args, cwd=cwd, env=env, start_new_session=True,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield Cli(proc)
    finally:
        kill_group(proc.pid)  # also whatever it started, even when it has exited itself
        await asyncio.wait_for(proc.wait(), WAIT)


def feeder(lines: list[str]) -> Any:
    queue: Iterator[str] = iter(lines)
    return lambda prompt: next(queue, None)


async def chat(project: Path | None, lines: list[str], package: Path = STORY) -> tuple[int, str]:
    """`crewagent chat` in-process, fed `lines` as the user's input; returns the exit code and everything printed."""
    out: list[str] = []
    args = argparse.Namespace(path=str(package), project=str(project) if project else None)
    code = await chat_cmd.chat(args, feeder(lines), out.append, lambda prompt: None)
    return code, "\n".join(out)


def process_env(llm: ScriptedLLM, home: Path) -> dict[str, str]:
    """The environment of a `crewagent` process that talks to the scripted model and keeps its runs in `home`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "SLACK_"))}
    env.update(
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="test-key",
        CREWAGENT_MODEL="scripted",
        CREWAGENT_HOME=str(home),
        PYTHONPATH=str(REPO),
    )
    return env


async def start_crewagent(
    spawn: Spawner, env: dict[str, str], *args: str, stdin: bytes = b""
) -> asyncio.subprocess.Process:
    """Start `python -m cli ARGS` through `spawn` (its process group ends with the test), `stdin` already written."""
    proc = await spawn(
        sys.executable, "-m", "crewagent.cli", *args,
        cwd=REPO, env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None
    proc.stdin.write(stdin)
    await proc.stdin.drain()
    proc.stdin.close()
    return proc
