"""shell_run's sandbox against escape attempts, with the real bwrap (no mocks)."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest

from crewagent.core.tools.off_limits import OffLimits
from crewagent.core.tools.shell.command_config import SandboxExtras
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from tests.support.shell_sandbox import ShellBench, commands, make_bench


@pytest.fixture
async def bench(tmp_path: Path) -> ShellBench:
    made = make_bench(tmp_path)
    state = await sandbox_state(made.config)
    if not state.usable:
        pytest.skip(f"bubblewrap does not work on this machine: {state.problem}")
    return made


def _host_processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


async def test_a_command_runs_in_the_project_and_shows_aliases_only(bench: ShellBench) -> None:
    (bench.project / "data.txt").write_text("forty-two\n")
    result = await bench.run("pwd; cat @project/data.txt; python3 @pkg/scripts/hello.py; echo err >&2; exit 3")
    assert result["ok"] is True, result
    assert result["exitCode"] == 3
    assert result["stdout"].splitlines() == ["@project", "forty-two", "hello from pkg"]
    assert result["stderr"] == "err\n"
    assert result["truncated"] is False
    assert str(bench.project) not in str(result) and str(bench.pkg) not in str(result)
    log_alias = result["log"]
    assert log_alias.startswith("@state/logs/commands/")
    kept = (bench.state / log_alias.removeprefix("@state/")).read_text()
    assert "forty-two" in kept and "err" in kept
    [event] = bench.commands_audited()
    assert event["exitCode"] == 3 and event["sandbox"] == "bwrap" and event["killed"] is None
    assert event["decision"] == "allow" and event["cwd"] == "@project" and event["outputBytes"] > 0


async def test_writes_land_only_in_the_project(bench: ShellBench, tmp_path: Path) -> None:
    marker = f"escape-{os.getpid()}-{time.monotonic_ns()}"
    result = await bench.run(
        f"echo x > /tmp/{marker}; echo x > $HOME/{marker}; echo x > @pkg/{marker}; echo x > /usr/{marker}; "
        f"echo x > /@git/{marker}; echo x > /{marker}; echo x > @project/../{marker}; echo x > @project/{marker}; "
        "ls /tmp"
    )
    assert result["ok"] is True, result
    assert (bench.project / marker).is_file()
    assert not (bench.pkg / marker).exists()
    assert not Path("/tmp", marker).exists() and not Path("/usr", marker).exists() and not Path("/", marker).exists()
    assert not (tmp_path / marker).exists()
    assert "Read-only file system" in result["stderr"]


async def test_the_bots_environment_and_host_secrets_are_invisible(bench: ShellBench, monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret-token-1234")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-key-5678")
    home = tmp_path / "crewagent-home"
    home.mkdir()
    (home / "state.txt").write_text("other-runs-secret")
    result = await bench.run(
        f"env; cat /proc/1/environ; cat /proc/*/environ; cat {home}/state.txt; ls /root /home; "
        "ps -e -o pid,args; cat /etc/shadow | head -1; ls /etc/ssh /etc/ssl/private"
    )
    text = str(result)
    assert "xoxb-secret-token-1234" not in text and "sk-secret-key-5678" not in text
    assert "other-runs-secret" not in text
    assert "ssh_host" not in text and not re.search(r"^root:", result["stdout"], re.M)  # host keys, password hashes
    assert "test_shell_escapes.py" not in result["stdout"]  # the host's processes (this test run) are invisible
    names = {line.split("=", 1)[0] for line in result["stdout"].splitlines() if "=" in line and line[0].isupper()}
    assert {"PATH", "HOME", "LANG"} <= names
    assert not any(n.startswith(("SLACK_", "OPENAI_", "CREWAGENT_")) for n in names)


async def test_operator_env_is_passed_with_host_variables_expanded(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_INDEX", "https://mirror.invalid/simple")
    made = make_bench(tmp_path, commands(env={"PIP_INDEX_URL": "${MY_INDEX}"}))
    result = await made.run("echo $PIP_INDEX_URL; echo ${MY_INDEX:-unset}")
    assert result["stdout"].splitlines() == ["https://mirror.invalid/simple", "unset"]


async def test_a_loopback_server_of_the_host_is_unreachable(bench: ShellBench) -> None:
    connections = 0

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        probe = (f"python3 -c \"import socket; s=socket.create_connection(('127.0.0.1', {port}), timeout=3); "
                 "print('CONNECTED')\"")
        result = await bench.run(probe)
        assert result["ok"] is True, result
        assert result["exitCode"] != 0 and "CONNECTED" not in result["stdout"]
        # the same probe from the host does connect: the server was really there
        with socket.create_connection(("127.0.0.1", port), timeout=3):
            pass
        await asyncio.wait_for(_until(lambda: connections == 1), 5)
    finally:
        server.close()
        await server.wait_closed()


async def _until(condition) -> None:  # type: ignore[no-untyped-def]
    while not condition():
        await asyncio.sleep(0.01)


async def test_a_background_process_ends_with_the_command(bench: ShellBench) -> None:
    marker = str(900_000 + os.getpid() % 90_000)
    result = await bench.run(f"(sleep {marker} &) ; nohup sleep {marker} >/dev/null 2>&1 & echo started",
                             approved="the owner")  # nohup asks
    assert result["ok"] is True and result["stdout"] == "started\n", result
    assert _host_processes_with(f"sleep\x00{marker}") == []


async def test_a_never_ending_command_times_out_and_leaves_nothing(bench: ShellBench) -> None:
    marker = str(800_000 + os.getpid() % 90_000)
    started = time.monotonic()
    result = await bench.run(f"echo before; sleep {marker}", timeout_seconds=1)
    assert time.monotonic() - started < 15
    assert result["ok"] is False
    assert result["error"]["code"] == "COMMAND_TIMEOUT"
    assert result["error"]["details"]["stdout"] == "before\n"
    assert _host_processes_with(f"sleep\x00{marker}") == []
    [event] = bench.commands_audited()
    assert event["killed"] == "timeout" and event["exitCode"] is None


async def test_a_cancelled_command_is_killed(bench: ShellBench) -> None:
    marker = str(700_000 + os.getpid() % 90_000)
    task = asyncio.create_task(bench.run(f"sleep {marker}"))
    await asyncio.wait_for(_until(lambda: bool(_host_processes_with(f"sleep\x00{marker}"))), 20)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(_until(lambda: not _host_processes_with(f"sleep\x00{marker}")), 10)


async def test_a_fork_bomb_is_bounded_and_the_loop_stays_responsive(tmp_path: Path) -> None:
    made = make_bench(tmp_path, commands(limits={"processes": 64}))
    state = await sandbox_state(made.config)
    if not state.usable or (os.geteuid() == 0 and not state.cgroup):
        pytest.skip("no process-count bound here (root without a pids cgroup)")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    running = asyncio.create_task(ticker())
    try:
        result = await made.run("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", timeout_seconds=8,
                                approved="the owner")  # a function definition asks
    finally:
        running.cancel()
    assert result["ok"] is True or result["error"]["code"] == "COMMAND_TIMEOUT", result
    assert ticks >= 10  # the event loop kept running while the bomb went off


async def test_huge_and_binary_output_is_bounded(bench: ShellBench) -> None:
    result = await bench.run("head -c 50000000 /dev/zero | tr '\\0' 'a'; head -c 20000 /dev/urandom >&2")
    assert result["ok"] is True and result["truncated"] is True
    assert len(result["stdout"].encode()) + len(result["stderr"].encode()) < bench.config.output_limit_bytes + 4096
    assert "bytes cut" in result["stdout"]
    assert not any(ch in result["stderr"] for ch in "\x00\x01\x1b")
    kept = (bench.state / result["log"].removeprefix("@state/")).stat().st_size
    assert 8_000_000 < kept < 9_000_000  # the run keeps a bounded log


async def test_stdin_is_empty_and_there_is_no_terminal(bench: ShellBench) -> None:
    result = await bench.run("read line; echo read=$?; cat; tty; python3 -c 'input()'", timeout_seconds=20)
    assert result["ok"] is True, result
    assert "read=1" in result["stdout"] and "not a tty" in result["stdout"]


async def test_a_symlink_out_of_the_project_cannot_be_followed_by_file_tools(bench: ShellBench) -> None:
    result = await bench.run("ln -s /etc/passwd @project/leak; ln -s / @project/root; ls -l @project")
    assert result["ok"] is True and result["exitCode"] == 0
    ctx = bench.context()
    for path in ("@project/leak", "@project/root/etc/passwd"):
        read = await bench.host.execute("fs_read", f'{{"path": "{path}"}}', ctx)
        assert read.result["ok"] is False and read.result["error"]["code"] == "E_SANDBOX_VIOLATION"


@pytest.mark.parametrize("cwd", ["@pkg", "@project/../..", "/etc", "@state", "@project/missing"])
async def test_cwd_must_be_a_folder_of_the_project(bench: ShellBench, cwd: str) -> None:
    result = await bench.run("touch here", cwd=cwd)
    assert result["ok"] is False and result["error"]["code"] == "COMMAND_INVALID"
    assert not (bench.pkg / "here").exists()


async def test_cwd_below_the_project(bench: ShellBench) -> None:
    (bench.project / "src").mkdir()
    result = await bench.run("pwd && touch made", cwd="@project/src")
    assert result.get("stdout") == "@project/src\n", result
    assert (bench.project / "src" / "made").is_file()


async def test_a_worktree_without_a_recorded_repository_shows_no_git_and_no_host_path(tmp_path: Path) -> None:
    """A linked worktree (a run recorded before runs had their own repository): its `.git` names a host path."""
    main = tmp_path / "main"
    subprocess.run(["git", "init", "-q", "-b", "main", str(main)], check=True)
    (main / "app.py").write_text("x = 1\n")
    git = ["git", "-C", str(main), "-c", "user.name=t", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    worktree = tmp_path / "wt"
    subprocess.run([*git, "worktree", "add", "-q", "-b", "run-1", str(worktree)], check=True)
    made = make_bench(tmp_path / "bench")
    made.project = worktree
    result = await made.run(f"cat @project/.git 2>&1 | grep -c '{tmp_path}'; ls /@git; git log --oneline; "
                            "printf 'gitdir: /tmp/x' > @project/.git")
    assert result["stdout"].split()[:1] == ["0"] and "first" not in result["stdout"], result
    assert (worktree / ".git").read_text().startswith(f"gitdir: {main}")
    log = subprocess.run([*git, "log", "--oneline", "--all"], capture_output=True, text=True, check=True).stdout
    assert "first" in log


async def test_a_stopped_run_ends_its_command(bench: ShellBench) -> None:
    marker = str(600_000 + os.getpid() % 90_000)
    stopped = False
    ctx = bench.context()
    ctx.stop_requested = lambda: stopped
    task = asyncio.create_task(bench.host.execute("shell_run", f'{{"command": "echo go; sleep {marker}"}}', ctx))
    await asyncio.wait_for(_until(lambda: bool(_host_processes_with(f"sleep\x00{marker}"))), 20)
    stopped = True
    outcome = await asyncio.wait_for(task, 20)
    assert outcome.result["error"]["code"] == "COMMAND_STOPPED"
    assert outcome.result["error"]["details"]["stdout"] == "go\n"
    assert _host_processes_with(f"sleep\x00{marker}") == []
    assert bench.commands_audited()[-1]["killed"] == "stopped"


async def test_the_config_file_inside_the_project_is_hidden(tmp_path: Path) -> None:
    made = make_bench(tmp_path)
    config = made.project / "crewagent.yml"
    config.write_text("secret-config-text\n")
    secrets = made.project / "private"
    secrets.mkdir()
    (secrets / "x").write_text("secret-folder-text\n")
    made.off_limits = OffLimits.of((config, secrets))
    result = await made.run("cat @project/crewagent.yml; ls @project/private; cat @project/private/x; rm -f @project/crewagent.yml")
    assert "secret-config-text" not in str(result) and "secret-folder-text" not in str(result)
    assert config.read_text() == "secret-config-text\n"


async def test_uv_and_the_products_read_only_extras_are_inside(tmp_path: Path) -> None:
    cache = tmp_path / "script-cache"
    cache.mkdir()
    (cache / "marker.txt").write_text("cached\n")
    made = make_bench(tmp_path / "b")
    extras = SandboxExtras(read_only=((str(cache), "/opt/crewagent/cache"),), env=(("UV_CACHE_DIR", "/opt/crewagent/cache"),))
    made.config = made.config.model_copy(update={"extras": extras})
    result = await made.run("uv --version && cat $UV_CACHE_DIR/marker.txt && touch /opt/crewagent/cache/new")
    assert result["exitCode"] != 0 and result["stdout"].startswith("uv ") and "cached" in result["stdout"]
    assert "Read-only file system" in result["stderr"] and not (cache / "new").exists()


_BOT_SCRIPT = """
import asyncio, sys
from pathlib import Path
from tests.support.shell_sandbox import make_bench
bench = make_bench(Path(sys.argv[1]))
asyncio.run(bench.run(sys.argv[2]))
"""


async def test_a_command_ends_when_the_bot_is_killed(tmp_path: Path) -> None:
    import signal
    import sys

    from tests.support.processes import kill_group

    marker = str(500_000 + os.getpid() % 90_000)
    repo = Path(__file__).resolve().parents[4]
    bot = subprocess.Popen([sys.executable, "-c", _BOT_SCRIPT, str(tmp_path / "bot"), f"sleep {marker}"],
                           cwd=repo, start_new_session=True)
    try:
        await asyncio.wait_for(_until(lambda: bool(_host_processes_with(f"sleep\x00{marker}"))), 30)
        os.kill(bot.pid, signal.SIGKILL)  # the bot alone: its sandboxes run in sessions of their own
        await asyncio.wait_for(_until(lambda: not _host_processes_with(f"sleep\x00{marker}")), 10)
    finally:
        kill_group(bot.pid)
        for pid in _host_processes_with(f"sleep\x00{marker}"):
            os.kill(pid, signal.SIGKILL)
        bot.wait(timeout=10)


async def test_the_sandbox_works_on_this_machine() -> None:
    """The escape tests skip where bubblewrap cannot work; this one says so as a failure, unless the
    machine is known to block user namespaces (CREWAGENT_TESTS_WITHOUT_SANDBOX=1)."""
    state = await sandbox_state(commands())
    if os.environ.get("CREWAGENT_TESTS_WITHOUT_SANDBOX") == "1":
        pytest.skip("this machine runs the tests without the command sandbox")
    assert state.usable, state.problem
