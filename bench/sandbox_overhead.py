"""What the shell_run sandbox costs: per command over a bare subprocess, on a real test suite, and on the loop.

1. Overhead per command: `true` run through the same runner bare (`/bin/sh -c`) and inside bubblewrap
   (prepare + run), and the whole `shell_run` tool call (policy, layout, log with the run, audit).
   Target: sandbox overhead ≤ 30 ms p50.
2. A real test suite (this repository's tests/core/tools/test_tools.py, with this venv as the read-only
   toolchain) inside the sandbox and bare (its temp files in memory, like the sandbox's /tmp).
   Target: ≤ 1.1× the bare time.
3. Event-loop lag (a proxy for how fast the bot acks Slack) while four CPU-busy commands run.
   Target: p99 ≤ 20 ms.

    python bench/sandbox_overhead.py [--runs 40] [--suite-runs 5] [--no-cgroup] [--landlock auto|on|off]

Where the host gives one, each command also joins a cgroup (its process count and its memory together;
the kernel exempts root from RLIMIT_NPROC); --no-cgroup measures the rlimits-only path. Every command
also pays for its disk budget (a walk of the worktree as it starts and as it ends) and for covering the
socket files of the folders it sees (the worktree searched each time, the others cached).
--landlock on measures the Landlock launcher on every command (the default, auto, uses it only for
commands with network, which these are not). The suite part also times the setuid/setgid sweep that
follows every command (in the background), over the copied repository.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crewagent.core.tools.base import EffectivePolicy, Mounts, ToolContext  # noqa: E402
from crewagent.core.tools.registry import ToolHost  # noqa: E402
from crewagent.core.tools.shell.bwrap import find_uv  # noqa: E402
from crewagent.core.tools.shell.command_config import CommandsConfig  # noqa: E402
from crewagent.core.tools.shell.command_runner import run  # noqa: E402
from crewagent.core.tools.shell.command_sandbox import bounds_summary, execute, prepare, sandbox_state  # noqa: E402
from crewagent.core.tools.shell.output_capture import OutputCapture  # noqa: E402
from crewagent.core.tools.shell.sandbox_layout import layout_for  # noqa: E402
from crewagent.core.tools.shell.special_bits import clear_special_bits  # noqa: E402

TOOLCHAIN = tuple(dict.fromkeys((sys.prefix, sys.base_prefix)))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bare(command: str, cwd: Path, timeout: float = 600) -> float:
    """The same command without a sandbox; its temp files go to memory too (/dev/shm), as the sandbox's /tmp does."""
    env = {"PATH": f"{sys.prefix}/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        started = time.perf_counter()
        await run(["/bin/sh", "-c", command], env={**env, "TMPDIR": tmp}, cwd=str(cwd), timeout=timeout,
                  capture=OutputCapture(32_768))
        return (time.perf_counter() - started) * 1000


CGROUP = True  # --no-cgroup: measure what a bot running as a normal user gets (rlimits only)
LANDLOCK = "auto"


async def sandboxed(config: CommandsConfig, project: Path, pkg: Path, command: str, timeout: int = 600) -> tuple[float, int | None]:
    state = await sandbox_state(config)
    if not CGROUP:
        state = dataclasses.replace(state, cgroup=False, memory_cgroup=False)
    started = time.perf_counter()
    layout = layout_for(project, pkg, toolchain=config.toolchain, uv=find_uv())
    prepared = await asyncio.to_thread(prepare, state, config, layout, command, "", timeout)
    finished = await execute(state, prepared, timeout, OutputCapture(32_768))
    return (time.perf_counter() - started) * 1000, finished.exit_code


async def per_command(runs: int, root: Path) -> None:
    project, pkg, state_dir = root / "project", root / "pkg", root / "state"
    for folder in (project, pkg, state_dir):
        folder.mkdir()
    config = CommandsConfig(default="allow", toolchain=TOOLCHAIN, landlock=LANDLOCK)
    state = await sandbox_state(config)
    if not state.usable:
        raise SystemExit(f"the sandbox does not work here: {state.problem}")
    ctx = ToolContext(mounts=Mounts(project=project, pkg=pkg, state=state_dir), policy=EffectivePolicy(shell=config),
                      mode="run", agent_id="bench", run_id="bench", audit=lambda e: None)
    host = ToolHost()
    bare_ms, box_ms, tool_ms = [], [], []
    for _ in range(3):  # warm up
        await bare("true", project)
        await sandboxed(config, project, pkg, "true")
    for _ in range(runs):
        bare_ms.append(await bare("true", project))
        box_ms.append((await sandboxed(config, project, pkg, "true"))[0])
        started = time.perf_counter()
        outcome = await host.execute("shell_run", json.dumps({"command": "true"}), ctx)
        tool_ms.append((time.perf_counter() - started) * 1000)
        assert outcome.result.get("exitCode") == 0, outcome.result
    over = [b - a for a, b in zip(bare_ms, box_ms)]
    bound = bounds_summary(state if CGROUP else dataclasses.replace(state, cgroup=False, memory_cgroup=False),
                           config.limits)[0]
    print(f"per command ({runs} runs, `true`; {bound}):")
    print(f"  bare subprocess      p50 {statistics.median(bare_ms):6.1f} ms   p90 {pct(bare_ms, .9):6.1f} ms")
    print(f"  in bubblewrap        p50 {statistics.median(box_ms):6.1f} ms   p90 {pct(box_ms, .9):6.1f} ms")
    print(f"  sandbox overhead     p50 {statistics.median(over):6.1f} ms   p90 {pct(over, .9):6.1f} ms   (target p50 <= 30 ms)")
    print(f"  whole shell_run call p50 {statistics.median(tool_ms):6.1f} ms   p90 {pct(tool_ms, .9):6.1f} ms")


async def suite(runs: int, root: Path) -> None:
    project = root / "repo"
    shutil.copytree(REPO, project, ignore=shutil.ignore_patterns(".venv*", ".git", "__pycache__", ".pytest_cache"))
    for folder in ("core", "bot", "cli"):  # the copy imports its own code as crewagent.* (the install maps the
        (project / "crewagent" / folder).symlink_to(Path("..") / folder)  # checkout's, which the sandbox cannot see)
    pkg = root / "suite-pkg"
    pkg.mkdir()
    config = CommandsConfig(default="allow", toolchain=TOOLCHAIN, landlock=LANDLOCK)
    command = "python -m pytest -q -x -n 0 -p no:cacheprovider tests/core/tools/test_tools.py"
    bare_s, box_s = [], []
    for _ in range(runs):
        bare_s.append(await bare(command, project) / 1000)
        ms, code = await sandboxed(config, project, pkg, command)
        assert code == 0, "the suite failed inside the sandbox"
        box_s.append(ms / 1000)
    files = sum(len(f) + len(d) for _, d, f in os.walk(project))
    sweeps = []
    for _ in range(5):
        started = time.perf_counter()
        clear_special_bits(project)
        sweeps.append((time.perf_counter() - started) * 1000)
    print(f"setuid/setgid sweep after each command: {statistics.median(sweeps):.1f} ms for {files} files and folders")
    ratio = statistics.median(box_s) / statistics.median(bare_s)
    print(f"test suite (tests/core/tools/test_tools.py, {runs} runs each): bare {statistics.median(bare_s):.2f} s, "
          f"sandboxed {statistics.median(box_s):.2f} s, ratio {ratio:.3f} (target <= 1.1)")


async def loop_lag(root: Path) -> None:
    project, pkg = root / "lag-project", root / "lag-pkg"
    project.mkdir()
    pkg.mkdir()
    config = CommandsConfig(default="allow", toolchain=TOOLCHAIN)
    busy = "python -c 'import time\nt=time.time()\nwhile time.time()-t<4: pass'"
    lags: list[float] = []

    async def ticker() -> None:
        while True:
            started = time.perf_counter()
            await asyncio.sleep(0.005)
            lags.append((time.perf_counter() - started) * 1000 - 5)

    tick = asyncio.create_task(ticker())
    await asyncio.gather(*(sandboxed(config, project, pkg, busy) for _ in range(4)))
    tick.cancel()
    print(f"event-loop lag while four busy commands run: p50 {statistics.median(lags):.1f} ms, "
          f"p99 {pct(lags, .99):.1f} ms, max {max(lags):.1f} ms (target p99 <= 20 ms)")


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--suite-runs", type=int, default=5)
    parser.add_argument("--no-cgroup", action="store_true", help="rlimits only: no cgroup per command")
    parser.add_argument("--landlock", choices=("auto", "on", "off"), default="auto")
    args = parser.parse_args()
    global CGROUP, LANDLOCK
    CGROUP = not args.no_cgroup
    LANDLOCK = args.landlock
    with tempfile.TemporaryDirectory(prefix="crewagent-bench-") as folder:
        root = Path(folder)
        await per_command(args.runs, root)
        await suite(args.suite_runs, root)
        await loop_lag(root)


if __name__ == "__main__":
    asyncio.run(main())
