"""Command cgroups on a host shared by several bots: each removes only groups whose maker is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.tools.shell.command_cgroup import CommandCgroup, detect

REPO = Path(__file__).resolve().parents[4]
_MAKER = """
import sys
from core.tools.shell.command_cgroup import CommandCgroup, detect
group = CommandCgroup.create(detect(), processes=64, memory_mb=256)
print(" ".join(str(p) for p in group.paths) if group else "", flush=True)
sys.stdin.readline()  # holds the fresh group, not yet joined, until told to go
group.remove()
"""
_STARTING_BOT = """
import asyncio
from core.tools.shell.command_config import CommandsConfig
from core.tools.shell.command_sandbox import sandbox_state
state = asyncio.run(sandbox_state(CommandsConfig(default="allow")))
print("usable" if state.usable else state.problem, flush=True)
"""


@pytest.fixture
def maker() -> subprocess.Popen[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root: command cgroups are made by a bot running as root (CI runs as root)")
    probe = CommandCgroup.create(detect(), processes=64, memory_mb=None)
    if probe is None:
        pytest.skip("no writable cgroup on this host")
    probe.remove()
    proc = subprocess.Popen([sys.executable, "-c", _MAKER], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    yield proc
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)


def _made_by(maker: subprocess.Popen[str]) -> list[Path]:
    assert maker.stdout is not None
    paths = [Path(p) for p in maker.stdout.readline().split()]
    assert paths and all(p.is_dir() for p in paths)
    assert all(p.name.startswith(f"crewagent-cmd-{maker.pid}-") for p in paths)
    return paths


def _start_another_bot() -> str:
    started = subprocess.run([sys.executable, "-c", _STARTING_BOT], cwd=REPO, capture_output=True, text=True,
                             timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})
    return started.stdout.strip() or started.stderr[-500:]


def test_a_fresh_group_of_one_bot_survives_another_bots_start(maker: subprocess.Popen[str]) -> None:
    paths = _made_by(maker)
    assert _start_another_bot() == "usable"
    assert all(p.is_dir() for p in paths)  # the other bot's clean-up left it alone
    assert maker.stdin is not None
    maker.stdin.write("go\n")
    maker.stdin.flush()
    assert maker.wait(timeout=20) == 0
    assert not any(p.exists() for p in paths)  # its maker removed it


def test_the_groups_of_a_bot_that_died_are_removed_at_the_next_start(maker: subprocess.Popen[str]) -> None:
    paths = _made_by(maker)
    os.kill(maker.pid, signal.SIGKILL)
    maker.wait(timeout=10)
    assert _start_another_bot() == "usable"
    assert not any(p.exists() for p in paths)
