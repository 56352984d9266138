"""Bounds that hold for a whole command, through shell_run with the real bwrap: memory of all its
processes together, what it adds to disk (the worktree and its /tmp), and no host socket reachable."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from crewagent.core.tools.shell.command_config import SandboxExtras
from crewagent.core.tools.shell.command_sandbox import sandbox_state, start_up_line
from tests.support.shell_sandbox import TOOLCHAIN, ShellBench, commands, make_bench

MB = 1024 * 1024
_HOG = ("python3 -c \"import time; n = 200 << 20; b = bytearray(n); b[::4096] = b'x' * (n // 4096); "
        "print('allocated', flush=True); time.sleep(60)\"")


async def _bench(tmp_path: Path, **limits: int) -> ShellBench:
    made = make_bench(tmp_path, commands(limits=limits))
    state = await sandbox_state(made.config)
    if not state.usable:
        pytest.skip(f"bubblewrap does not work on this machine: {state.problem}")
    return made


async def _memory_bench(tmp_path: Path) -> ShellBench:
    if os.geteuid() != 0:
        pytest.skip("needs root: a memory cgroup per command (CI runs as root)")
    made = await _bench(tmp_path, memory_mb=300)
    if not (await sandbox_state(made.config)).memory_cgroup:
        pytest.skip("this host gives no writable memory cgroup")
    return made


async def test_four_processes_together_pass_the_memory_bound_and_the_model_is_told(tmp_path: Path) -> None:
    made = await _memory_bench(tmp_path)
    result = await made.run(f"for i in 1 2 3 4; do {_HOG} & done; wait", timeout_seconds=20)
    assert result["ok"] is False and result["error"]["code"] == "COMMAND_OUT_OF_MEMORY", result
    assert "300 MB" in result["error"]["message"] and "limits.memory_mb" in result["error"]["message"]
    assert made.commands_audited()[-1]["killed"] == "memory"


async def test_one_process_under_the_memory_bound_runs(tmp_path: Path) -> None:
    made = await _memory_bench(tmp_path)
    result = await made.run(_HOG.replace("time.sleep(60)", "print('done')"), timeout_seconds=20)
    assert result["ok"] is True and result["exitCode"] == 0, result
    assert result["stdout"] == "allocated\ndone\n"


async def test_writing_past_disk_mb_into_the_worktree_stops_the_command(tmp_path: Path) -> None:
    made = await _bench(tmp_path, disk_mb=50)
    writer = ("python3 -c \"import time\nwith open('@project/big', 'wb') as f:\n for _ in range(300):\n"
              "  f.write(b'x' * (1 << 20)); f.flush(); time.sleep(0.005)\"")
    result = await made.run(writer, timeout_seconds=30)
    assert result["ok"] is False and result["error"]["code"] == "COMMAND_DISK_LIMIT", result
    message = result["error"]["message"]
    assert "50 MB" in message and "limits.disk_mb" in message and "delete" in message
    assert (made.project / "big").stat().st_size < 200 * MB  # stopped long before it finished
    [event] = made.commands_audited()
    assert event["killed"] == "disk" and event["diskAddedMb"] > 50


async def test_tmp_and_the_worktree_count_together(tmp_path: Path) -> None:
    made = await _bench(tmp_path, disk_mb=50)
    result = await made.run("head -c 30M /dev/zero > /tmp/a && head -c 30M /dev/zero > @project/b && sleep 20",
                            timeout_seconds=15)
    assert result["ok"] is False and result["error"]["code"] == "COMMAND_DISK_LIMIT", result
    alone = await made.run("rm @project/b && head -c 30M /dev/zero > @project/b && echo fits", timeout_seconds=15)
    assert alone["ok"] is True and alone["stdout"] == "fits\n", alone


async def test_a_command_that_ends_past_disk_mb_is_reported(tmp_path: Path) -> None:
    made = await _bench(tmp_path, disk_mb=20)
    result = await made.run("head -c 40M /dev/zero > @project/quick", timeout_seconds=15)
    assert result["ok"] is False and result["error"]["code"] == "COMMAND_DISK_LIMIT", result
    added = re.search(r"added about (\d+) MB", result["error"]["message"])  # when it was caught: at the end or before
    assert added is not None and 20 < int(added.group(1)) <= 41


@contextlib.contextmanager
def listening(path: Path) -> Iterator[list[int]]:
    """A host process's Unix socket at `path`, accepting; yields one entry per connection it accepted."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    accepted: list[int] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield accepted
    finally:
        server.shutdown(socket.SHUT_RDWR)
        server.close()
        thread.join(5)


@pytest.mark.parametrize("where", ["toolchain", "extra", "project"])
async def test_a_host_unix_socket_in_a_visible_folder_cannot_be_reached(tmp_path: Path, where: str) -> None:
    made = await _bench(tmp_path / "b")
    tools, extra = tmp_path / "tools", tmp_path / "extra"
    tools.mkdir()
    extra.mkdir()
    made.config = made.config.model_copy(update={
        "toolchain": (*TOOLCHAIN, str(tools)), "extras": SandboxExtras(read_only=((str(extra), "/opt/crewagent/x"),))})
    folder, shown = {"toolchain": (tools, str(tools)), "extra": (extra, "/opt/crewagent/x"),
                     "project": (made.project, "@project")}[where]
    with listening(folder / "d.sock") as accepted:
        result = await made.run(f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                                f"s.connect('{shown}/d.sock'); print('CONNECTED')\"")
        assert result["ok"] is True and result["exitCode"] != 0 and "CONNECTED" not in result["stdout"], result
        with socket.socket(socket.AF_UNIX) as probe:  # the same connect from the host works: the server is there
            probe.connect(str(folder / "d.sock"))
        await asyncio.wait_for(_until(lambda: len(accepted) == 1), 5)


async def _until(condition) -> None:  # type: ignore[no-untyped-def]
    while not condition():
        await asyncio.sleep(0.01)


async def test_the_start_up_line_says_how_memory_and_disk_are_bounded() -> None:
    config = commands(limits={"memory_mb": 512, "disk_mb": 100})
    state = await sandbox_state(config)
    if not state.usable:
        pytest.skip(f"bubblewrap does not work on this machine: {state.problem}")
    level, line = await start_up_line(config)
    assert "disk 100 MB added to the worktree and /tmp" in line
    if state.memory_cgroup:
        assert level == logging.INFO and "memory 512 MB for all of a command's processes together" in line
    else:
        assert level == logging.WARNING and "memory_mb bounds each process alone" in line


def test_without_a_memory_cgroup_memory_is_bounded_per_process_and_the_start_up_line_says_why() -> None:
    from crewagent.core.tools.shell.bwrap import prlimit_prefix
    from crewagent.core.tools.shell.command_cgroup import CgroupHost
    from crewagent.core.tools.shell.command_config import CommandLimits
    from crewagent.core.tools.shell.command_sandbox import SandboxState, bounds_summary

    limits = CommandLimits(memory_mb=300)
    why = "cgroup v1 memory: no write access to this process's group"
    state = SandboxState("bwrap", "bwrap", None, cgroup=False, cgroups=CgroupHost((), {"memory": why}))
    in_force, warnings = bounds_summary(state, limits)
    assert "memory 300 MB per process" in in_force
    assert any("memory_mb bounds each process alone" in w and why in w for w in warnings)
    assert f"--as={300 * MB}" in prlimit_prefix(limits, 60, processes=True, per_process_memory=True)
    assert not any(a.startswith("--as=") for a in prlimit_prefix(limits, 60, processes=True, per_process_memory=False))
