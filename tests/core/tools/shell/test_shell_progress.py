"""shell_run reports a running command to the run's surface: start, time so far with the last line, the end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crewagent.core.base.events import CommandProgress, EngineEvent
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from tests.support.shell_sandbox import make_bench


async def test_progress_events_of_a_command(tmp_path: Path) -> None:
    bench = make_bench(tmp_path)
    if not (await sandbox_state(bench.config)).usable:
        pytest.skip("bubblewrap does not work on this machine")
    events: list[EngineEvent] = []

    async def collect(event: EngineEvent) -> None:
        events.append(event)

    ctx = bench.context()
    ctx.progress = collect
    command = f"echo first; echo {tmp_path}/x; sleep 3.5; echo last >&2; exit 2"
    outcome = await bench.host.execute("shell_run", json.dumps({"command": command}), ctx)
    assert outcome.result["exitCode"] == 2
    progress = [e for e in events if isinstance(e, CommandProgress)]
    assert progress[0].running and progress[0].elapsed_ms < 3000
    ticks = [e for e in progress[1:-1] if e.running]
    assert ticks and ticks[0].last_line.endswith("/x")
    end = progress[-1]
    assert not end.running and end.exit_code == 2 and end.killed is None
    assert end.tail.splitlines()[0] == "first" and end.tail.splitlines()[-1] == "last"
    assert end.log == outcome.result["log"] and end.cwd == "@project"
    assert len({e.call_id for e in progress}) == 1
