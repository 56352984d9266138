"""Engine overhead per LLM turn on the example workflows, against a zero-latency scripted model.

Overhead of a turn = the wall time the pump spends outside the awaited LLM call (compose, tools,
validation, persistence, fsyncs) between the previous call's answer (or the pump's start) and the
next call (or the pump's end). Targets (SPEC §7): median ≤ 2 ms; create-story-micro ≤ 9 calls.

    python -m bench.engine_overhead [--runs 20] [--check]
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

from core.engine import Engine  # noqa: E402
from core.events import RunPhase  # noqa: E402
from core.llm import LLMClient, LLMReply, LLMSettings  # noqa: E402
from core.package.loader import load_package  # noqa: E402
from core.runs import RunManager  # noqa: E402
from core.store import RuntimeStore  # noqa: E402
from core.tools.registry import ToolHost  # noqa: E402
from tests.fakes.llm_server import ScriptedLLM  # noqa: E402
from tests.scripts import (  # noqa: E402
    HELLO_LINEAR_ANSWER,
    STORY_KEY,
    create_story_responder,
    hello_branch_responder,
    hello_linear_responder,
    project_type_answer,
)

EXAMPLES = REPO / "examples"


@dataclass
class Scenario:
    name: str
    package: str
    workflow: str | None
    agent: str | None
    responder: Callable[[], Callable[[dict[str, Any]], Any]]
    answers: list[str]


SCENARIOS = [
    Scenario("create-story-micro", "create-story-micro", None, "sm", create_story_responder, [STORY_KEY]),
    Scenario("hello-branch", "hello-branch", None, None, hello_branch_responder,
             [project_type_answer("greenfield")]),
    Scenario("multi-workflows/hello-linear", "multi-workflows", "hello-linear", "analyst", hello_linear_responder,
             [HELLO_LINEAR_ANSWER]),
]


class Clock:
    """Time outside the LLM call, split per turn, and how much of it the tools took."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self.tools: list[float] = []
        self._mark = 0.0
        self._tool_time = 0.0

    def pump_started(self) -> None:
        self._mark, self._tool_time = time.perf_counter(), 0.0

    def llm_started(self) -> None:
        self.gaps.append(time.perf_counter() - self._mark)
        self.tools.append(self._tool_time)
        self._tool_time = 0.0

    def llm_ended(self) -> None:
        self._mark = time.perf_counter()

    def pump_ended(self) -> None:
        """The tail after the last reply belongs to the last turn."""
        if self.gaps:
            self.gaps[-1] += time.perf_counter() - self._mark
            self.tools[-1] += self._tool_time


class TimedLLM:
    def __init__(self, client: LLMClient, clock: Clock) -> None:
        self.client, self.clock = client, clock

    async def complete(self, *args: Any, **kwargs: Any) -> LLMReply:
        self.clock.llm_started()
        try:
            return await self.client.complete(*args, **kwargs)
        finally:
            self.clock.llm_ended()


class TimedTools(ToolHost):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    async def execute(self, name: str, raw_arguments: str, ctx: Any, *, call_id: str = "") -> Any:
        started = time.perf_counter()
        try:
            return await super().execute(name, raw_arguments, ctx, call_id=call_id)
        finally:
            self.clock._tool_time += time.perf_counter() - started


@dataclass
class Figures:
    turn_ms: list[float] = field(default_factory=list)
    tools_ms: list[float] = field(default_factory=list)
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
            clock.gaps.clear()
            clock.tools.clear()
            clock.pump_started()
            result = await engine.pump(record, package, intent=intent, user_input=user_input)  # type: ignore[arg-type]
            clock.pump_ended()
            figures.turn_ms += [1000 * t for t in clock.gaps]
            figures.tools_ms += [1000 * t for t in clock.tools]
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
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"Engine overhead per LLM turn (zero-latency model, {runs} runs each, home on {work.parent})")
    print("(per turn: all work outside the LLM call; 'w/o tools' leaves out the time inside ToolHost.execute)")
    print(f"{'scenario':30} {'turns':>5} {'median ms':>9} {'p95 ms':>8} {'w/o tools med':>13} {'p95':>7}"
          f" {'LLM calls/run':>13}")
    every: list[float] = []
    own: list[float] = []
    for name, fig in results.items():
        every += fig.turn_ms
        mine = [t - u for t, u in zip(fig.turn_ms, fig.tools_ms)]
        own += mine
        calls = sorted(set(fig.calls_per_run))
        print(f"{name:30} {len(fig.turn_ms):>5} {statistics.median(fig.turn_ms):>9.3f} {p95(fig.turn_ms):>8.3f}"
              f" {statistics.median(mine):>13.3f} {p95(mine):>7.3f} {'/'.join(map(str, calls)):>13}")
    median_all = statistics.median(every)
    print(f"{'all':30} {len(every):>5} {median_all:>9.3f} {p95(every):>8.3f} {statistics.median(own):>13.3f}"
          f" {p95(own):>7.3f}")
    story_calls = max(results["create-story-micro"].calls_per_run)
    ok = median_all <= 2.0 and story_calls <= 9
    print(f"targets: median <= 2 ms ({'ok' if median_all <= 2.0 else 'MISSED'}), "
          f"create-story-micro <= 9 calls ({'ok' if story_calls <= 9 else 'MISSED'})")
    return 0 if ok or not check else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="completed runs per scenario (default 20)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument("--serve", metavar="SCENARIO", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        asyncio.run(serve(args.serve))
        sys.exit(0)
    sys.exit(asyncio.run(main(args.runs, args.check)))
