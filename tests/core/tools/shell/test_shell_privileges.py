"""shell_run commands hold no privilege: no root, no capabilities, no sysctl, no mount or namespace, no setuid
file left behind; with the real bwrap, through the tool itself. A probe never changes the host: a sysctl is
opened for writing and closed without a byte written."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from crewagent.core.tools.shell.command_config import CommandsConfig
from crewagent.core.tools.shell.command_sandbox import protections, sandbox_state, start_up_line
from crewagent.core.tools.shell.special_bits import swept
from tests.support.shell_sandbox import ShellBench, commands, make_bench

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the bot runs as root only here (CI runs as root)")
SYSCTLS = ("kernel/core_pattern", "kernel/modprobe", "kernel/sysrq", "vm/drop_caches", "kernel/hostname",
           "net/ipv4/ip_forward", "fs/suid_dumpable")


async def _bench(root: Path, config: CommandsConfig | None = None) -> ShellBench:
    made = make_bench(root, config)
    state = await sandbox_state(made.config)
    if not state.usable:
        pytest.skip(f"bubblewrap does not work on this machine: {state.problem}")
    return made


@pytest.fixture
async def bench(tmp_path: Path) -> ShellBench:
    return await _bench(tmp_path)


def _special_files(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.lstat().st_mode & (stat.S_ISUID | stat.S_ISGID)]


async def test_sysctls_cannot_be_opened_for_writing(bench: ShellBench) -> None:
    """The core_pattern escape: a pipe to a script in the worktree would run as host root on the next crash."""
    opens = "; ".join(f"(exec 3>>/proc/sys/{name}) 2>/dev/null && echo WRITABLE {name}" for name in SYSCTLS)
    result = await bench.run(f"{opens}; ls /proc/sys/kernel/core_pattern; (exec 3>>/sys/kernel/uevent_helper) "
                             "2>/dev/null && echo WRITABLE sys", approved="the owner")
    assert result["ok"] is True, result
    assert "core_pattern" in result["stdout"]  # it is there to read
    assert "WRITABLE" not in result["stdout"], result["stdout"]


async def test_commands_hold_no_capability_and_cannot_gain_any(bench: ShellBench) -> None:
    result = await bench.run("grep -E '^(CapEff|CapPrm|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")
    status = dict(line.split(":\t") for line in result["stdout"].splitlines())
    assert status["CapEff"] == status["CapPrm"] == status["CapAmb"] == "0000000000000000", status
    assert int(status["CapBnd"], 16) == 0 or os.geteuid() != 0, status  # a root bot's commands: empty bounding set
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status


async def test_mounts_namespaces_and_personality_changes_are_refused(bench: ShellBench) -> None:
    result = await bench.run(
        "unshare -m sh -c 'mount -t tmpfs none /tmp && echo MOUNTED-IN-NS'; unshare -U true && echo USERNS; "
        "unshare -r true && echo ROOT-USERNS; mount -t tmpfs none /tmp/home && echo MOUNTED; "
        "unshare -n true && echo NETNS; setarch $(uname -m) -R true && echo PERSONALITY; "
        "python3 -c 'import ctypes; l=ctypes.CDLL(None, use_errno=True); "
        "print(\"PTRACE\" if l.ptrace(16, 1, 0, 0) == 0 else ctypes.get_errno())'",
        approved="the owner")
    assert result["ok"] is True, result
    for escape in ("MOUNTED", "USERNS", "NETNS", "PERSONALITY", "PTRACE"):
        assert escape not in result["stdout"], result


async def test_no_setuid_or_setgid_file_stays_in_the_project(bench: ShellBench) -> None:
    planted = bench.project / "unpacked-setuid"  # as an archive or a checkout could leave it
    planted.write_text("#!/bin/sh\n")
    planted.chmod(0o6755)
    result = await bench.run(
        "cp /bin/true @project/a && chmod u+s @project/a; cp /bin/true @project/b && chmod g+s @project/b; "
        "install -m 4755 /bin/true @project/c; mkdir -m 2775 @project/d; "
        "python3 -c \"import os; os.close(os.open('/@project/e', os.O_CREAT | os.O_WRONLY, 0o4755))\"; "
        "python3 -c \"import os; os.mknod('/@project/f', 0o104755)\"; ls -l @project",
        approved="the owner")
    assert result["ok"] is True, result
    await swept(bench.project)  # the sweep after a command runs in the background
    assert _special_files(bench.project) == []
    assert stat.S_IMODE(planted.stat().st_mode) == 0o755


@needs_root
async def test_files_a_command_writes_belong_to_the_sandbox_user(bench: ShellBench) -> None:
    (bench.project / "src").mkdir()  # the bot made the folder: root owns it, as a worktree it checked out
    assert bench.project.stat().st_uid == 0
    result = await bench.run("id -u; id -G; touch @project/made @project/src/deep && mkdir @project/folder")
    assert result["ok"] is True and result["exitCode"] == 0, result
    assert result["stdout"].split() == ["65534", "65534"]
    for made in ("made", "src/deep", "folder", "src", "."):
        info = (bench.project / made).stat()
        assert (info.st_uid, info.st_gid) == (65534, 65534), made
    assert (bench.project / "made").read_text() == ""  # the bot still reads what the command wrote


@needs_root
async def test_run_as_and_the_project_owner_choose_the_user(tmp_path: Path) -> None:
    chosen = await _bench(tmp_path / "a", commands(run_as="4321:4322"))
    result = await chosen.run("id -u; id -g; touch @project/x")
    assert result["stdout"].split() == ["4321", "4322"]
    assert (chosen.project / "x").stat().st_uid == 4321
    owned = await _bench(tmp_path / "b")
    os.chown(owned.project, 5432, 5433)
    result = await owned.run("id -u; touch @project/y")
    assert result["stdout"].split() == ["5432"] and (owned.project / "y").stat().st_uid == 5432


@needs_root
async def test_a_root_only_file_is_unreadable(tmp_path: Path) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    secret = tools / "root-only.key"
    secret.write_text("root-only-secret\n")
    secret.chmod(0o600)
    made = await _bench(tmp_path / "b", commands(toolchain=[str(tools), *commands().toolchain]))
    result = await made.run(f"cat {secret}; ls {tools}")
    assert "root-only.key" in result["stdout"]  # the folder is there, the file too
    assert "root-only-secret" not in str(result) and "Permission denied" in result["stderr"]


async def test_the_hosts_abstract_sockets_are_out_of_reach_with_network_on(tmp_path: Path) -> None:
    made = await _bench(tmp_path, commands(network=True))
    state = await sandbox_state(made.config)
    if not state.landlock:
        pytest.skip(f"no Landlock here: {state.landlock_problem}")
    name = f"crewagent-test-{os.getpid()}"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind("\0" + name)
    server.listen(1)
    try:
        probe = (f"python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('\\0{name}'); "
                 "print('CONNECTED')\"")
        result = await made.run(probe)
        assert result["ok"] is True and "CONNECTED" not in result["stdout"], result
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:  # from the host it is reachable
            client.connect("\0" + name)
    finally:
        server.close()


async def test_landlock_on_keeps_commands_working(tmp_path: Path) -> None:
    made = await _bench(tmp_path, commands(landlock="on"))
    state = await sandbox_state(made.config)
    if not state.landlock:
        pytest.skip(f"no Landlock here: {state.landlock_problem}")
    result = await made.run("echo ok > @project/a && echo ok > /tmp/b && echo ok > $HOME/c && echo ok > /dev/null "
                            "&& mkdir /dev/shm/x && cat @project/a /tmp/b")
    assert result["ok"] is True and result["exitCode"] == 0, result
    assert result["stdout"].splitlines() == ["ok", "ok"]


async def test_the_start_up_line_names_what_is_in_force() -> None:
    config = commands()
    state = await sandbox_state(config)
    if not state.usable:
        pytest.skip(f"bubblewrap does not work on this machine: {state.problem}")
    _, line = await start_up_line(config)
    assert "no capabilities" in line and "no_new_privs" in line and "/proc/sys read-only" in line
    assert ("seccomp filter" in line) == (state.seccomp is not None)
    assert ("uid:gid" in line) and ("never root" in line) == (os.geteuid() == 0)
    in_force, missing = protections(state, config.model_copy(update={"landlock": "off"}))
    assert any("Landlock off" in part for part in in_force) and not any("Landlock" in m for m in missing)
    no_kernel = state.__class__(**{**state.__dict__, "landlock": 0, "landlock_problem": "the kernel has no Landlock"})
    assert any("the kernel has no Landlock" in m for m in protections(no_kernel, config)[1])


@pytest.mark.parametrize("run_as", ["root", "0", "0:0", "1000:0", "root:staff", "a b", "1000:"])
def test_run_as_never_names_root_and_is_well_formed(run_as: str) -> None:
    if run_as == "1000:":
        assert CommandsConfig(run_as=run_as).run_as == "1000:"
        return
    with pytest.raises(ValidationError):
        CommandsConfig(run_as=run_as)
