"""Engine overhead per LLM turn on the example workflows, against a zero-latency scripted model.

The overhead of a pump is its wall time minus the time spent inside `LLMClient.complete` (the
SDK building the request, the loopback HTTP round trip and the scripted model, which runs in its
own process so its CPU never counts). It is split per LLM call: a turn is the work between the
previous call's answer (or the pump's start) and the next call, plus, for the last turn, the
tail after the last answer. That covers composing the prompt, running the tools, validating and
writing the state, the conversation and audit logs and the run index. Targets (docs/benchmarks.md): median
≤ 2 ms per turn; create-story-micro in ≤ 9 LLM calls.

    BENCH_DIR=/dev/shm python bench/engine_overhead.py [--runs 20] [--check]

Beside wall time it reports CPU time (this thread's, time.thread_time): per turn outside the call,
and per call inside it (the SDK building the request and reading the answer), since wall time is
noisy on a shared machine and CPU is what limits how many runs one process can drive.

BENCH_DIR picks the filesystem for the runtime home and the project copies (default: the temp
dir). Every state write and run-index write is an atomic replace (temp file + rename over the old
file); the report measures what one costs on that filesystem, since on a disk filesystem it can
dominate a turn (ext4 flushes the new file's data at such a rename).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crewagent.core.base.answers import UserInput  # noqa: E402
from crewagent.core.base.atomic import atomic_write_bytes  # noqa: E402
from crewagent.core.run.engine import Engine  # noqa: E402
from crewagent.core.base.events import RunPhase  # noqa: E402
from crewagent.core.model.client import LLMClient, LLMReply, LLMSettings  # noqa: E402
from crewagent.core.package.loader import load_package  # noqa: E402
from crewagent.core.store.run_manager import RunManager  # noqa: E402
from crewagent.core.store.files import RuntimeStore  # noqa: E402
from crewagent.core.tools.registry import ToolHost  # noqa: E402
from tests.support.fakes.llm_server import ScriptedLLM  # noqa: E402
from tests.support.scripts import (  # noqa: E402
    FEATURE_ANSWER,
    HELLO_LINEAR_ANSWER,
    STORY_KEY,
    create_story_responder,
    direction_answer,
    hello_branch_responder,
    hello_linear_responder,
    hello_subflow_responder,
    project_type_answer,
)

EXAMPLES = REPO / "examples"
TARGET_MEDIAN_MS = 2.0
TARGET_STORY_CALLS = 9


@dataclass
class Scenario:
    name: str
    package: str
    workflow: str | None
    agent: str | None
    responder: Callable[[], Callable[[dict[str, Any]], Any]]
    answers: list[UserInput]  # typed words, or a question's typed answer


SCENARIOS = [
    Scenario("create-story-micro", "create-story-micro", None, "sm", create_story_responder, [STORY_KEY]),
    Scenario(
        "hello-branch", "hello-branch", None, None, hello_branch_responder, [project_type_answer("greenfield")]
    ),
    Scenario(
        "multi-workflows/hello-linear",
        "multi-workflows",
        "hello-linear",
        "analyst",
        hello_linear_responder,
        [HELLO_LINEAR_ANSWER],
    ),
    Scenario(  # a sub-workflow call: the child's run created, pumped nested, its outputs returned
        "hello-subflow", "hello-subflow", None, None, hello_subflow_responder, [FEATURE_ANSWER, direction_answer()]
    ),
]


class Clock:
    """Splits one pump's wall and CPU time into per-turn overhead, LLM calls and time inside the tools."""

    def __init__(self) -> None:
        self.turns: list[float] = []  # overhead per turn
        self.tools: list[float] = []  # of which inside ToolHost.execute
        self.calls: list[float] = []  # each LLMClient.complete
        self.turn_cpu: list[float] = []  # CPU of each turn's overhead
        self.call_cpu: list[float] = []  # CPU inside each LLMClient.complete
        self._mark = self._cpu_mark = 0.0
        self._tool_time = 0.0
        self._call_started = self._call_cpu_started = 0.0

    def pump_started(self) -> None:
        self.turns, self.tools, self.calls, self.turn_cpu, self.call_cpu = [], [], [], [], []
        self._mark, self._cpu_mark, self._tool_time = time.perf_counter(), time.thread_time(), 0.0

    def llm_started(self) -> None:
        self._call_started, self._call_cpu_started = time.perf_counter(), time.thread_time()
        self.turns.append(self._call_started - self._mark)
        self.turn_cpu.append(self._call_cpu_started - self._cpu_mark)
        self.tools.append(self._tool_time)
        self._tool_time = 0.0

    def llm_ended(self) -> None:
        self._mark, self._cpu_mark = time.perf_counter(), time.thread_time()
        self.calls.append(self._mark - self._call_started)
        self.call_cpu.append(self._cpu_mark - self._call_cpu_started)

    def tool_ran(self, seconds: float) -> None:
        self._tool_time += seconds

    def pump_ended(self) -> None:
        """The tail after the last answer (recording it, ending the pump) belongs to the last turn."""
        if self.turns:
            self.turns[-1] += time.perf_counter() - self._mark
            self.turn_cpu[-1] += time.thread_time() - self._cpu_mark
            self.tools[-1] += self._tool_time


class TimedLLM:
    def __init__(self, client: LLMClient, clock: Clock) -> None:
        self.client, self.clock = client, clock
        self.model = client.model  # the model a run's calls name unless its conversation chose another

    async def complete(self, *args: Any, **kwargs: Any) -> LLMReply:
        self.clock.llm_started()
        try:
            return await self.client.complete(*args, **kwargs)
        finally:
            self.clock.llm_ended()


class TimedTools(ToolHost):
    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock

    async def execute(self, name: str, raw_arguments: str, ctx: Any, *, call_id: str = "") -> Any:
        started = time.perf_counter()
        try:
            return await super().execute(name, raw_arguments, ctx, call_id=call_id)
        finally:
            self.clock.tool_ran(time.perf_counter() - started)


@dataclass
class Figures:
    turn_ms: list[float] = field(default_factory=list)
    tools_ms: list[float] = field(default_factory=list)
    call_ms: list[float] = field(default_factory=list)
    turn_cpu_ms: list[float] = field(default_factory=list)
    call_cpu_ms: list[float] = field(default_factory=list)
    calls_per_run: list[int] = field(default_factory=list)


async def serve(name: str) -> None:
    """Child process: a ScriptedLLM answering like the scenario's model, until stdin closes."""
    scenario = next(s for s in SCENARIOS if s.name == name)
    async with ScriptedLLM(responder=scenario.responder()) as llm:
        print(llm.base_url, flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


@asynccontextmanager
async def model_server(name: str) -> AsyncIterator[str]:
    """The scripted model runs in its own process, so its CPU time never counts as engine time."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--serve", name, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdin is not None
    try:
        yield (await proc.stdout.readline()).decode().strip()
    finally:
        proc.stdin.close()
        await proc.wait()


async def run_scenario(scenario: Scenario, runs: int, work: Path, client: LLMClient) -> Figures:
    store = RuntimeStore(work / "home")
    manager = RunManager(store)
    clock = Clock()
    engine = Engine(store, manager, TimedLLM(client, clock), tools=TimedTools(clock))  # type: ignore[arg-type]
    package = load_package(EXAMPLES / scenario.package, cache_dir=store.packages_dir)
    figures = Figures()
    for n in range(runs):
        project = work / f"project-{scenario.package}-{n}"
        shutil.copytree(EXAMPLES / "sample-project", project)
        record = manager.create(package, scenario.workflow, scenario.agent, project)
        answers = list(scenario.answers)
        intent, user_input, calls = "start", None, 0
        while True:
            clock.pump_started()
            result = await engine.pump(record, package, intent=intent, user_input=user_input)  # type: ignore[arg-type]
            clock.pump_ended()
            figures.turn_ms += [1000 * t for t in clock.turns]
            figures.tools_ms += [1000 * t for t in clock.tools]
            figures.call_ms += [1000 * t for t in clock.calls]
            figures.turn_cpu_ms += [1000 * t for t in clock.turn_cpu]
            figures.call_cpu_ms += [1000 * t for t in clock.call_cpu]
            calls += result.llm_calls
            if result.phase is not RunPhase.WAITING_USER or not answers:
                break
            intent, user_input = "continue", answers.pop(0)
        if result.phase is not RunPhase.COMPLETED:
            raise SystemExit(f"{scenario.name}: run {n} ended {result.phase.value}: {result.error}")
        figures.calls_per_run.append(calls)
    return figures


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]


def filesystem_of(path: Path) -> str:
    """The type of the filesystem holding `path` (longest matching mount point in /proc/mounts)."""
    real = os.path.realpath(path)
    best, kind = "", "unknown"
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return kind
    for line in mounts:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        inside = real == point or real.startswith(point.rstrip("/") + "/")
        if inside and len(point) > len(best):
            best, kind = point, parts[2]
    return kind


def replace_cost_ms(folder: Path, rounds: int = 50) -> float:
    """Median time of one atomic replace of a state-sized file in `folder`."""
    target = folder / "replace-probe.md"
    atomic_write_bytes(target, b"x")
    times = []
    for n in range(rounds):
        started = time.perf_counter()
        atomic_write_bytes(target, b"%d" % n * 300)
        times.append(time.perf_counter() - started)
    target.unlink()
    return 1000 * statistics.median(times)


def report(results: dict[str, Figures], runs: int, where: Path) -> tuple[float, int]:
    print(f"Engine overhead per LLM turn: zero-latency scripted model (own process), {runs} completed runs per example")
    print(
        f"runtime home and projects on {where} ({filesystem_of(where)}); "
        f"one atomic replace there takes {replace_cost_ms(where):.3f} ms"
    )
    print("overhead = pump wall time - time inside LLMClient.complete (SDK + loopback HTTP + model server)")
    print()
    head = f"{'example':30} {'turns':>5} {'median ms':>9} {'p95 ms':>7} {'in tools':>8} {'LLM calls/run':>13}"
    print(head + f" {'LLM call ms':>11}")
    every: list[float] = []
    for name, fig in results.items():
        every += fig.turn_ms
        calls = "/".join(str(c) for c in sorted(set(fig.calls_per_run)))
        print(
            f"{name:30} {len(fig.turn_ms):>5} {statistics.median(fig.turn_ms):>9.3f} {p95(fig.turn_ms):>7.3f}"
            f" {statistics.median(fig.tools_ms):>8.3f} {calls:>13} {statistics.median(fig.call_ms):>11.3f}"
        )
    median_all = statistics.median(every)
    tools_all = statistics.median([t for fig in results.values() for t in fig.tools_ms])
    calls_all = statistics.median([t for fig in results.values() for t in fig.call_ms])
    print(
        f"{'all':30} {len(every):>5} {median_all:>9.3f} {p95(every):>7.3f} {tools_all:>8.3f}"
        f" {'':>13} {calls_all:>11.3f}"
    )
    print("(in tools: median time per turn inside ToolHost.execute, part of the overhead;")
    print(" LLM call: median time of one call, not part of the overhead)")
    print()
    print("CPU time (this thread) per turn: overhead, and inside the LLM call (SDK request + response)")
    print(f"{'example':30} {'turns':>5} {'mean ms':>8} {'median ms':>9} {'call mean ms':>12} {'call median ms':>14}")
    turn_cpu = [t for fig in results.values() for t in fig.turn_cpu_ms]
    call_cpu = [t for fig in results.values() for t in fig.call_cpu_ms]
    rows = [(name, fig.turn_cpu_ms, fig.call_cpu_ms) for name, fig in results.items()] + [("all", turn_cpu, call_cpu)]
    for name, turns, calls_cpu in rows:
        print(
            f"{name:30} {len(turns):>5} {statistics.mean(turns):>8.3f} {statistics.median(turns):>9.3f}"
            f" {statistics.mean(calls_cpu):>12.3f} {statistics.median(calls_cpu):>14.3f}"
        )
    return median_all, max(results["create-story-micro"].calls_per_run)


async def main(runs: int, check: bool) -> int:
    work = Path(tempfile.mkdtemp(prefix="crewagent-bench-", dir=os.environ.get("BENCH_DIR")))
    os.environ["CREWAGENT_HOME"] = str(work / "home")
    results: dict[str, Figures] = {}
    try:
        for scenario in SCENARIOS:
            async with model_server(scenario.name) as base_url:
                client = LLMClient(LLMSettings(model="scripted", base_url=base_url, max_retries=0))
                try:
                    await run_scenario(scenario, 2, work / "warmup", client)  # imports, caches, connections
                    results[scenario.name] = await run_scenario(scenario, runs, work / "measured", client)
                finally:
                    await client.aclose()
        median_all, story_calls = report(results, runs, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    median_ok, calls_ok = median_all <= TARGET_MEDIAN_MS, story_calls <= TARGET_STORY_CALLS
    print(
        f"targets: median <= {TARGET_MEDIAN_MS:g} ms ({'ok' if median_ok else 'MISSED'}), "
        f"create-story-micro <= {TARGET_STORY_CALLS} LLM calls ({'ok' if calls_ok else 'MISSED'})"
    )
    return 0 if (median_ok and calls_ok) or not check else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="completed runs per example (default 20)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--serve", metavar="SCENARIO", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        sys.exit(0)
    sys.exit(asyncio.run(main(args.runs, args.check)))
