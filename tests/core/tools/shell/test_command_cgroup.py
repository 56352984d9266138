"""Command cgroups on a host shared by several bots: each removes only groups whose maker is gone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from crewagent.core.tools.shell.command_cgroup import CommandCgroup, Hierarchy, detect, host_from

REPO = Path(__file__).resolve().parents[4]
_MAKER = """
import sys
from crewagent.core.tools.shell.command_cgroup import CommandCgroup, Hierarchy, detect, host_from
group = CommandCgroup.create(detect(), processes=64, memory_mb=256)
print(" ".join(str(p) for p in group.paths) if group else "", flush=True)
sys.stdin.readline()  # holds the fresh group, not yet joined, until told to go
group.remove()
"""
_STARTING_BOT = """
import asyncio
from crewagent.core.tools.shell.command_config import CommandsConfig
from crewagent.core.tools.shell.command_sandbox import sandbox_state
state = asyncio.run(sandbox_state(CommandsConfig(default="allow")))
print("usable" if state.usable else state.problem, flush=True)
"""


@pytest.fixture
def maker() -> Iterator[subprocess.Popen[str]]:
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


def _tree(root: Path, groups: dict[str, str]) -> None:
    """A cgroup2-like folder tree: each group with the controllers it gives its children."""
    for rel, enabled in groups.items():
        folder = root / rel
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "cgroup.subtree_control").write_text(enabled)


def test_v2_groups_go_under_the_nearest_ancestor_that_gives_both_controllers(tmp_path: Path) -> None:
    _tree(tmp_path, {"": "cpu memory pids", "system.slice": "memory pids", "system.slice/bot.service": ""})
    mounts = [f"30 25 0:26 / {tmp_path} rw,nosuid - cgroup2 cgroup2 rw"]
    host = host_from(["0::/system.slice/bot.service"], mounts, ("pids", "memory"))
    assert host.hierarchies == (Hierarchy(2, tmp_path / "system.slice", ("pids", "memory")),) and not host.missing


def test_v2_without_memory_delegated_keeps_pids_and_says_why(tmp_path: Path) -> None:
    _tree(tmp_path / "docker", {"": "pids", "abc": ""})
    mounts = [f"30 25 0:26 /docker {tmp_path}/docker rw - cgroup2 cgroup2 rw"]  # a container's view
    host = host_from(["0::/docker/abc"], mounts, ("pids", "memory"))
    assert host.hierarchies == (Hierarchy(2, tmp_path / "docker", ("pids",)),)
    assert "memory is not enabled" in host.missing["memory"]


def test_v1_takes_one_group_per_controller_where_each_is_mounted(tmp_path: Path) -> None:
    (tmp_path / "pids").mkdir()
    (tmp_path / "memory" / "box").mkdir(parents=True)
    mounts = [f"40 25 0:40 / {tmp_path}/pids rw - cgroup cgroup rw,pids",
              f"41 25 0:41 / {tmp_path}/memory rw - cgroup cgroup rw,memory",
              f"42 25 0:42 / {tmp_path}/unified rw - cgroup2 cgroup2 rw"]
    host = host_from(["8:pids:/", "4:memory:/box", "0::/"], mounts, ("pids", "memory"))
    assert host.hierarchies == (Hierarchy(1, tmp_path / "pids", ("pids",)),
                                Hierarchy(1, tmp_path / "memory" / "box", ("memory",)))
