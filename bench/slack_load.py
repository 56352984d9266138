"""Slack-side load: ack latency under busy threads, run throughput with a slow model, memory per idle
session, and (replicas over Postgres) failover time after kill -9.

The bot runs in its own process(es) (as deployed), in HTTP mode, against FakeSlack and ScriptedLLM on
loopback in this process; deliveries are signed like Slack's and spread round-robin over the
replicas. Targets (docs/benchmarks.md):
- ack p99 ≤ 20 ms with 100 active threads (runs pumping against a slow model while events arrive);
- 200 concurrent runs with a 500 ms model finish within 1.2× the time of one run (run cap raised);
- memory per idle session: RSS growth of the bot process per stored idle thread.

    python -m bench.slack_load [--threads 100] [--bursts 40] [--burst-size 10] [--runs 200] [--idle 1000]
    python -m bench.slack_load --database auto --replicas 2 [--lease 15]   # replicas over Postgres
    python -m bench.slack_load --only ack runs --metrics both   # the cost of keeping metrics (`metrics:`)

`--database auto` starts a throwaway PostgreSQL server (the system's binaries, as the tests do).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

from tests.support.fakes.llm_server import ScriptedLLM  # noqa: E402
from tests.support.fakes.slack_api import BOT_TOKEN, FakeSlack  # noqa: E402
from tests.support.fakes.slack_events import app_mention_event, deliver_event, message_event, new_ts  # noqa: E402
from tests.support.scripts import hello_branch_responder  # noqa: E402

SECRET = "bench-signing-secret"
METRICS_ON = [True]  # whether the bots started next keep metrics (`--metrics`)
PROFILE_CLOCK = ["wall"]  # what the bots' cProfile counts (`--profile-clock`)
EXAMPLES = REPO / "examples"


# ---- the bot process ------------------------------------------------------------------------------


def _bot_main(
    conn: Connection, env: dict[str, str], project: str, packages: list[str], max_runs: int, lease: float
) -> None:
    os.environ.update(env)
    asyncio.run(_bot_async(conn, project, packages, max_runs, lease))


async def _bot_async(conn: Connection, project: str, packages: list[str], max_runs: int, lease: float) -> None:
    from crewagent.bot.serve.app import build
    from crewagent.bot.serve.heap import freeze_startup_heap
    from crewagent.bot.config import load_config
    from crewagent.bot.logging import setup_logging

    setup_logging("WARNING")
    config = load_config(project=project, packages=packages)
    config.limits.max_concurrent_runs = max_runs
    config.lease_seconds = lease
    config.metrics = os.environ.get("BENCH_METRICS", "1") == "1"
    bot = build(config)
    port = await bot.start_http("127.0.0.1", 0)
    freeze_startup_heap()  # as `crewagent serve` does
    conn.send(("port", port))
    loop = asyncio.get_running_loop()
    profiles: list[_Profile] = []
    sampler: _Sampler | None = None
    try:
        while True:
            command = await loop.run_in_executor(None, conn.recv)
            if command == "stop":
                break
            if command == "memory":
                conn.send(("memory", _memory_kib(), await bot.store.count()))
            elif command == "cpu":
                conn.send(("cpu", time.process_time(), _thread_cpu()))
            elif command == "profile-start":
                profiles = [_Profile()]
                profiles[0].start()
                conn.send(("profiling",))
            elif isinstance(command, tuple) and command[0] == "profile-stop":
                profiles[0].stop()
                profiles[0].dump(command[1] + ".prof")
                conn.send(("profiled",))
            elif command == "sample-start":
                sampler = _Sampler(await _current_thread_id())
                sampler.start()
                conn.send(("sampling",))
            elif command == "sample-stop" and sampler is not None:
                conn.send(("samples", sampler.stop()))
            elif command == "idle":
                conn.send(("idle", await bot.idle(120)))
    finally:
        await bot.close(grace=5)
        conn.send(("stopped",))


async def _current_thread_id() -> int:
    import threading

    return threading.get_ident()


class _Profile:
    """cProfile of the event loop's thread: wall time, or (`--profile-clock cpu`) the thread's CPU time,
    which time the loop lost to other processes on a busy machine does not inflate."""

    def __init__(self) -> None:
        import cProfile

        cpu = os.environ.get("BENCH_PROFILE_CLOCK") == "cpu"
        self.profile = cProfile.Profile(time.thread_time) if cpu else cProfile.Profile()

    def start(self) -> None:
        self.profile.enable()

    def stop(self) -> None:
        self.profile.disable()

    def dump(self, path: str) -> None:
        self.profile.dump_stats(path)


# Where a sampled work-loop stack is spent: the innermost frame matching a rule names the bucket
# (library frames such as json, pathlib, pydantic or aiohttp count for the code that called them).
SAMPLE_BUCKETS: list[tuple[str, tuple[str, ...]]] = [
    ("file writes: temp file + rename, log appends (core/base/atomic.py)", ("/core/base/atomic.py",)),
    ("state file read + parse (core/document, yaml)", ("/core/document/", "/yaml/")),
    ("model call: openai SDK + httpx2 + aiohttp", ("/openai/", "/httpx2/", "/httpcore2/")),
    ("Slack Web API calls (slack_sdk + aiohttp)", ("/slack_sdk/", "/bot/slack_port.py")),
    ("Block Kit rendering", ("/bot/render/",)),
    ("tools (fs_*), besides their writes", ("/core/tools/",)),
    ("run records + run index (core/store/run_manager.py, files.py, run_index.py)", ("/core/store/run_manager.py", "/core/store/files.py", "/core/store/run_index.py")),
    ("conversation history + audit events", ("/core/store/history.py", "/core/run/reporter.py", "/core/run/tool_round.py")),
    ("session service (core/session)", ("/core/session/",)),
    ("engine: prompts, pump", ("/core/",)),
    ("bot: dispatch, lanes, status board, thread store", ("/bot/",)),
    ("event loop plumbing", ("/asyncio/",)),
]


def _bucket(files: list[str]) -> str:
    if files and files[0].endswith("selectors.py"):
        return "idle (waiting in epoll)"
    for file in files:  # innermost first
        for name, marks in SAMPLE_BUCKETS:
            if any(mark in file for mark in marks):
                return name
    return "other"


class _Sampler:
    """Samples one thread's stack every `period` s: unlike cProfile it adds no per-call cost, so the
    proportions are those of the real run (coroutine frames are attributed to the code running)."""

    def __init__(self, thread_id: int, period: float = 0.002) -> None:
        import threading

        self.thread_id, self.period = thread_id, period
        self.counts: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def start(self) -> None:
        # A sampler needs the GIL, and a busy thread gives it up at its next system call or after the
        # switch interval (5 ms): samples would pile up on file I/O. A 50 µs interval makes the hand-over
        # land on an arbitrary bytecode instead, so the counts are proportional to time spent.
        self._interval = sys.getswitchinterval()
        sys.setswitchinterval(0.00005)
        self._thread.start()

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        sys.setswitchinterval(self._interval)
        return self.counts

    def _run(self) -> None:
        while not self._stop.wait(self.period):
            frame = sys._current_frames().get(self.thread_id)
            files = []
            while frame is not None:
                files.append(frame.f_code.co_filename)
                frame = frame.f_back
            bucket = _bucket(files)
            self.counts[bucket] = self.counts.get(bucket, 0) + 1


def _thread_cpu() -> dict[str, float]:
    """CPU seconds per thread name (the event loop, to_thread workers, sqlite writers)."""
    import threading

    names = {t.native_id: t.name for t in threading.enumerate()}
    ticks = os.sysconf("SC_CLK_TCK")
    totals: dict[str, float] = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(task), "other")
        group = "event loop" if name == "MainThread" else (
            "to_thread workers" if name.startswith(("asyncio_", "ThreadPoolExecutor")) else "other threads"
        )
        totals[group] = totals.get(group, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return totals


def _memory_kib() -> dict[str, int]:
    """VmRSS (now) and VmHWM (peak) of this process, in KiB."""
    values: dict[str, int] = {}
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(("VmRSS:", "VmHWM:")):
                name, amount = line.split(":", 1)
                values[name] = int(amount.split()[0])
    return values


class BotProcess:
    def __init__(
        self,
        slack: FakeSlack,
        llm: ScriptedLLM,
        home: Path,
        project: Path,
        packages: list[str],
        max_runs: int,
        database_url: str | None = None,
        lease: float = 3.0,
    ) -> None:
        env = {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_URL": slack.api_url,
            "CREWAGENT_MODEL": "scripted",
            "OPENAI_BASE_URL": llm.base_url,
            "OPENAI_API_KEY": "bench",
            "CREWAGENT_HOME": str(home),
            "BENCH_METRICS": "1" if METRICS_ON[0] else "0",
            "BENCH_PROFILE_CLOCK": PROFILE_CLOCK[0],
        }
        if database_url:
            env["CREWAGENT_DATABASE_URL"] = database_url
        self.conn, child = mp.get_context("spawn").Pipe()
        self.process = mp.get_context("spawn").Process(
            target=_bot_main,
            args=(child, env, str(project), [str(EXAMPLES / p) for p in packages], max_runs, lease),
        )
        self.url = ""

    async def _ask(self, command: str | None = None, timeout: float = 180) -> tuple[Any, ...]:
        if command is not None:
            self.conn.send(command)
        loop = asyncio.get_running_loop()
        ready = await loop.run_in_executor(None, self.conn.poll, timeout)
        if not ready:
            raise TimeoutError(f"bot process did not answer {command!r}")
        return self.conn.recv()

    async def __aenter__(self) -> BotProcess:
        self.process.start()
        _, port = await self._ask()
        self.url = f"http://127.0.0.1:{port}/slack/events"
        return self

    async def memory(self) -> tuple[dict[str, int], int]:
        _, memory, sessions = await self._ask("memory")
        return memory, sessions

    async def idle(self) -> None:
        await self._ask("idle")

    async def cpu(self) -> tuple[float, dict[str, float]]:
        """CPU seconds the bot process has used so far (all its threads), and per thread group."""
        _, seconds, threads = await self._ask("cpu")
        return seconds, threads

    async def profile_start(self) -> None:
        await self._ask("profile-start")

    async def profile_stop(self, path: str) -> None:
        await self._ask(("profile-stop", path))

    async def sample_start(self) -> None:
        await self._ask("sample-start")

    async def sample_stop(self) -> dict[str, int]:
        _, counts = await self._ask("sample-stop")
        return counts

    def kill(self) -> None:
        """kill -9, as a crashed host would."""
        self.process.kill()
        self.process.join(10)

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self.process.is_alive():
                await self._ask("stop", timeout=60)
        finally:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()


class Bots:
    """One bot process, or N replicas over one database (each with its own CREWAGENT_HOME)."""

    def __init__(
        self,
        slack: FakeSlack,
        llm: ScriptedLLM,
        home: Path,
        project: Path,
        packages: list[str],
        max_runs: int,
        *,
        replicas: int = 1,
        database_url: str | None = None,
        lease: float = 3.0,
    ) -> None:
        self.processes = [
            BotProcess(slack, llm, home.with_name(f"{home.name}-{i}"), project, packages, max_runs, database_url, lease)
            for i in range(replicas)
        ]

    @property
    def urls(self) -> list[str]:
        return [bot.url for bot in self.processes]

    async def cpu(self) -> tuple[float, dict[str, float]]:
        total, groups = 0.0, {}
        for bot in self.processes:
            if bot.process.is_alive():
                seconds, threads = await bot.cpu()
                total += seconds
                for name, spent in threads.items():
                    groups[name] = groups.get(name, 0.0) + spent
        return total, groups

    async def __aenter__(self) -> Bots:
        for bot in self.processes:
            await bot.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for bot in self.processes:
            await bot.__aexit__(*exc)


# ---- the load generator process ------------------------------------------------------------------


def _load_main(conn: Connection, urls: list[str], bursts: list[list[dict[str, Any]]], gap: float) -> None:
    """Deliver the bursts from a process of its own, so the fakes' work never delays the measuring side."""
    conn.send(asyncio.run(_load_async(urls, bursts, gap)))


async def _load_async(urls: list[str], bursts: list[list[dict[str, Any]]], gap: float) -> list[float]:
    latencies: list[float] = []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        for url in urls:  # open a connection to each replica
            await timed_delivery(http, url, message_event("warm-up", thread_ts=new_ts()))
        for burst in bursts:
            latencies += await asyncio.gather(
                *(timed_delivery(http, urls[i % len(urls)], e) for i, e in enumerate(burst))
            )
            await asyncio.sleep(gap)
    return latencies


async def generate_load(urls: list[str], bursts: list[list[dict[str, Any]]], gap: float) -> list[float]:
    ctx = mp.get_context("spawn")
    conn, child = ctx.Pipe()
    process = ctx.Process(target=_load_main, args=(child, urls, bursts, gap))
    process.start()
    try:
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, conn.poll, 300):
            raise TimeoutError("load generator did not finish")
        return conn.recv()
    finally:
        process.join(10)


# ---- helpers ---------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


async def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)  # polling the fake's records in a benchmark driver, not synchronising tests


def completions(slack: FakeSlack) -> set[str]:
    return {str(p.get("thread_ts")) for p in slack.calls_to("chat.postMessage") if "completed" in str(p.get("text"))}


def greeted(slack: FakeSlack) -> set[str]:
    return {str(p.get("thread_ts")) for p in slack.calls_to("chat.postMessage")}


async def timed_delivery(http: aiohttp.ClientSession, url: str, envelope: dict[str, Any]) -> float:
    started = time.perf_counter()
    status, _ = await deliver_event(http, url, SECRET, envelope)
    elapsed = (time.perf_counter() - started) * 1000
    if status != 200:
        raise RuntimeError(f"delivery answered {status}")
    return elapsed


# ---- scenarios ---------------------------------------------------------------------------------------


async def ack_latency(
    http: aiohttp.ClientSession,
    workdir: Path,
    threads: int,
    bursts: int,
    burst_size: int,
    replicas: int = 1,
    database_url: str | None = None,
) -> dict[str, float]:
    """Open `threads` threads whose runs keep pumping (slow model), then fire bursts of thread replies."""
    responder = hello_branch_responder(preset_branch="greenfield")
    async with FakeSlack() as slack, ScriptedLLM(latency=5.0, responder=responder) as llm:
        project = _project(workdir, "ack")
        home = workdir / "home-ack"
        async with Bots(
            slack, llm, home, project, ["hello-branch"], threads + 10, replicas=replicas, database_url=database_url
        ) as bots:
            tops = [new_ts() for _ in range(threads)]
            for i, ts in enumerate(tops):
                await timed_delivery(http, bots.urls[i % replicas], app_mention_event("<@UBOT> hello-branch", ts=ts))
            await wait_until(lambda: len(llm.requests) >= threads, 60, "every thread's run to be pumping")
            planned = [
                [
                    message_event(f"ping {burst}", ts=new_ts(), thread_ts=tops[(burst * burst_size + i) % threads])
                    for i in range(burst_size)
                ]
                for burst in range(bursts)
            ]
            latencies = await generate_load(bots.urls, planned, gap=0.02)  # bursts a few tens of ms apart
    return {
        "deliveries": len(latencies),
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
    }


async def run_throughput(
    http: aiohttp.ClientSession,
    workdir: Path,
    runs: int,
    latency: float,
    profile: str | None = None,
    sample: bool = False,
    replicas: int = 1,
    database_url: Callable[[], str] | None = None,
    lease: float = 3.0,
) -> dict[str, Any]:
    """Wall time for one hello-branch run, then for `runs` at once: the same workload, 7 model calls each.

    With replicas, a resume notice in any thread means a replica took over a run whose replica was
    alive (busy, not dead): `false_takeovers` counts them."""
    results: dict[str, Any] = {}
    workdir = Path(tempfile.mkdtemp(prefix="runs-", dir=workdir))  # a fresh home and project per pass
    for label, count in (("one", 1), ("many", runs)):
        responder = hello_branch_responder(preset_branch="greenfield")
        async with FakeSlack() as slack, ScriptedLLM(latency=latency, responder=responder) as llm:
            project = _project(workdir, f"runs-{count}")
            home = workdir / f"home-runs-{count}"
            async with Bots(
                slack, llm, home, project, ["hello-branch"], count + 8, replicas=replicas,
                database_url=database_url() if database_url else None, lease=lease,
            ) as bots:
                bot = bots.processes[0]
                tops = [new_ts() for _ in range(count)]
                mentions = [app_mention_event("<@UBOT> hello-branch", ts=t) for t in tops]
                if profile and label == "many":
                    await bot.profile_start()
                if sample and label == "many":
                    await bot.sample_start()
                (bot_cpu, threads_before), own_cpu = await bots.cpu(), time.process_time()
                started = time.perf_counter()
                await asyncio.gather(
                    *(timed_delivery(http, bots.urls[i % replicas], m) for i, m in enumerate(mentions))
                )
                await wait_until(lambda: completions(slack) >= set(tops), 600, "every run to complete")
                results[f"{label}_s"] = time.perf_counter() - started
                bot_cpu_after, threads_after = await bots.cpu()
                if sample and label == "many":
                    results["samples"] = await bot.sample_stop()
                if profile and label == "many":
                    await bot.profile_stop(profile)
                results[f"{label}_bot_cpu_s"] = bot_cpu_after - bot_cpu
                results[f"{label}_threads_cpu_s"] = {
                    name: spent - threads_before.get(name, 0.0) for name, spent in threads_after.items()
                }
                results[f"{label}_fakes_cpu_s"] = time.process_time() - own_cpu
                results[f"{label}_llm_calls"] = len(llm.requests)
                results[f"{label}_false_takeovers"] = sum(
                    "Picking this run up" in str(p.get("text")) for p in slack.calls_to("chat.postMessage")
                )
                results["home_fs"], results["project_fs"] = filesystem_of(home.parent), filesystem_of(project)
    results["ratio"] = results["many_s"] / results["one_s"]
    return results


async def failover(http: aiohttp.ClientSession, workdir: Path, database_url: str, lease: float) -> dict[str, float]:
    """Two replicas; kill -9 the one pumping a run in the middle of a model call, and time until the
    other has resumed it (the thread shows the resume notice) and completed it."""
    competent = hello_branch_responder(preset_branch="greenfield")
    held, release = asyncio.Event(), asyncio.Event()

    async def respond(body: dict[str, Any]) -> Any:
        if len(llm.requests) == 2:
            held.set()
            await release.wait()
        return competent(body)

    async with FakeSlack() as slack, ScriptedLLM(responder=respond) as llm:
        project = _project(workdir, "failover")
        async with Bots(
            slack, llm, workdir / "home-failover", project, ["hello-branch"], 8,
            replicas=2, database_url=database_url, lease=lease,
        ) as bots:
            top = new_ts()
            await timed_delivery(http, bots.urls[0], app_mention_event("<@UBOT> hello-branch", ts=top))
            await asyncio.wait_for(held.wait(), 60)
            bots.processes[0].kill()  # it received the mention, so it holds the thread
            killed = time.perf_counter()
            release.set()

            def posted(needle: str) -> bool:
                return any(needle in str(p.get("text")) for p in slack.calls_to("chat.postMessage")
                           if p.get("thread_ts") == top)

            await wait_until(lambda: posted("Picking this run up"), lease * 4 + 60, "the run to be resumed")
            resumed = time.perf_counter() - killed
            await wait_until(lambda: posted("completed"), 120, "the resumed run to complete")
            completed = time.perf_counter() - killed
    return {"lease_s": lease, "resumed_s": resumed, "completed_s": completed}


def filesystem_of(path: Path) -> str:
    """'<type> at <mount point>' for the mount holding `path` (longest matching mount point)."""
    real = os.path.realpath(path)
    best = ("?", "/")
    with open("/proc/self/mounts") as mounts:
        for line in mounts:
            _, point, kind = line.split()[:3]
            inside = real == point or real.startswith(point.rstrip("/") + "/")
            if inside and len(point) >= len(best[1]):
                best = (kind, point)
    return f"{best[0]} at {best[1]}"


async def idle_memory(http: aiohttp.ClientSession, workdir: Path, sessions: int) -> dict[str, float]:
    """RSS growth of the bot process per idle thread session (a greeting shown, nothing running)."""
    async with FakeSlack() as slack, ScriptedLLM() as llm:
        project = _project(workdir, "idle")
        home = workdir / "home-idle"
        async with BotProcess(slack, llm, home, project, ["create-story-micro", "multi-workflows"], max_runs=8) as bot:
            warm = [new_ts() for _ in range(20)]
            await asyncio.gather(*(timed_delivery(http, bot.url, app_mention_event("<@UBOT>", ts=t)) for t in warm))
            await wait_until(lambda: greeted(slack) >= set(warm), 60, "warm-up greetings")
            await bot.idle()
            before, _ = await bot.memory()
            tops = [new_ts() for _ in range(sessions)]
            for start in range(0, sessions, 50):
                chunk = tops[start : start + 50]
                mentions = [app_mention_event("<@UBOT>", ts=t) for t in chunk]
                await asyncio.gather(*(timed_delivery(http, bot.url, m) for m in mentions))
                await wait_until(lambda: greeted(slack) >= set(chunk), 60, "greetings")
            await bot.idle()
            after, stored = await bot.memory()
        db_bytes = sum(f.stat().st_size for f in (home / "slack").glob("*.sqlite*"))
    grown = after["VmRSS"] - before["VmRSS"]
    return {
        "sessions_stored": stored,
        "rss_before_mib": before["VmRSS"] / 1024,
        "rss_after_mib": after["VmRSS"] / 1024,
        "peak_rss_mib": after["VmHWM"] / 1024,
        "rss_per_idle_session_kib": grown / sessions,
        "sqlite_bytes_per_session": db_bytes / max(stored, 1),
    }


def _project(workdir: Path, name: str) -> Path:
    dest = workdir / f"project-{name}"
    shutil.copytree(EXAMPLES / "sample-project", dest)
    return dest


def _report_runs(runs: dict[str, Any], args: argparse.Namespace, where: str) -> None:
    count, calls = args.runs, runs["many_llm_calls"]
    threads = ", ".join(f"{name} {spent:.1f} s" for name, spent in sorted(runs["many_threads_cpu_s"].items()))
    print(
        f"runs with a {args.latency * 1000:.0f} ms model, {_store(args)} [{where}: CREWAGENT_HOME on {runs['home_fs']}, "
        f"project on {runs['project_fs']}]: one run {runs['one_s']:.2f} s, "
        f"{count} concurrent runs {runs['many_s']:.2f} s → {runs['ratio']:.2f}× (target ≤ 1.2×); "
        f"model calls {runs['one_llm_calls']} / {calls}"
        + (f"; runs taken over from a live replica: {runs['many_false_takeovers']} (lease {args.lease:g} s)"
           if args.database else "")
    )
    print(
        f"  CPU: one run {runs['one_bot_cpu_s']:.2f} s in the bot; {count} runs {runs['many_bot_cpu_s']:.1f} s "
        f"in the bot ({threads}) = {runs['many_bot_cpu_s'] / max(calls, 1) * 1000:.1f} ms per model turn; "
        f"fake Slack + model process {runs['many_fakes_cpu_s']:.1f} s"
    )
    samples: dict[str, int] | None = runs.get("samples")
    if samples is None:
        return
    busy = {name: n for name, n in samples.items() if not name.startswith("idle")}
    total = sum(samples.values()) or 1
    per_turn = runs["many_threads_cpu_s"].get("event loop", 0.0) / max(calls, 1) * 1000
    print(
        f"  event loop, sampled every 2 ms (separate run; sampling shortens the GIL switch interval): busy {sum(busy.values()) / total:.0%} of the time; "
        f"its {per_turn:.1f} ms of CPU per model turn goes to:"
    )
    for name, n in sorted(busy.items(), key=lambda item: -item[1]):
        print(f"    {n / max(sum(busy.values()), 1):5.1%}  {name}")


def _store(args: argparse.Namespace) -> str:
    return f"{args.replicas} replica(s) on Postgres" if args.database else "embedded store, 1 process"


async def main(args: argparse.Namespace) -> int:
    # The bot is stopped while its runs still stream from the fake model: the fakes' writes to the
    # connections it closed are expected, not worth a traceback each.
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)
    server = None
    if args.database == "auto":
        from tests.support.postgres import PostgresServer, find_bindir

        bindir = find_bindir()
        if bindir is None:
            print("--database auto needs the PostgreSQL server binaries (initdb, postgres)", file=sys.stderr)
            return 2
        server = PostgresServer.start(bindir)
    try:
        return await _main(args, server)
    finally:
        if server is not None:
            server.stop()


async def _main(args: argparse.Namespace, server: Any) -> int:
    def fresh_database() -> str:
        if server is not None:
            return str(server.url(server.create_database()))
        return str(args.database)

    database = fresh_database if args.database else None
    bases = {"disk": None, "shm": "/dev/shm"}
    places = ["disk", "shm"] if args.storage == "both" else [args.storage]
    workdirs = {place: Path(tempfile.mkdtemp(prefix="crewagent-slack-bench-", dir=bases[place])) for place in places}
    workdir = workdirs[places[0]]
    ok = True
    PROFILE_CLOCK[0] = args.profile_clock
    try:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as http:
            for metrics in {"on": [True], "off": [False], "both": [False, True]}[args.metrics]:
                METRICS_ON[0] = metrics
                if args.metrics == "both":
                    print(f"-- metrics {'on' if metrics else 'off'}")
                ok = await _latency_scenarios(args, http, workdir, workdirs, places, database) and ok
            if "failover" in args.only and database:
                fail = await failover(http, workdir, database(), args.lease)
                print(
                    f"failover after kill -9 of the pumping replica (lease {fail['lease_s']:.1f} s): resumed by the "
                    f"other after {fail['resumed_s']:.2f} s, run completed after {fail['completed_s']:.2f} s"
                )
            if "memory" in args.only:
                memory = await idle_memory(http, workdir, args.idle)
                print(
                    f"idle sessions: {memory['sessions_stored']:.0f} stored; RSS {memory['rss_before_mib']:.1f} → "
                    f"{memory['rss_after_mib']:.1f} MiB (peak {memory['peak_rss_mib']:.1f} MiB) = "
                    f"{memory['rss_per_idle_session_kib']:.2f} KiB per idle session; "
                    f"{memory['sqlite_bytes_per_session']:.0f} bytes of sqlite per session"
                )
        return 0 if ok or not args.check else 1
    finally:
        for place in places:
            shutil.rmtree(workdirs[place], ignore_errors=True)


async def _latency_scenarios(
    args: argparse.Namespace, http: aiohttp.ClientSession, workdir: Path, workdirs: dict[str, Path],
    places: list[str], database: Callable[[], str] | None,
) -> bool:
    """The ack and run scenarios (those `--metrics both` runs twice); False when a target is missed."""
    ok = True
    workdir = Path(tempfile.mkdtemp(prefix="pass-", dir=workdir))  # a fresh home and project per pass
    if "ack" in args.only:
        ack = await ack_latency(
            http, workdir, args.threads, args.bursts, args.burst_size, args.replicas,
            database() if database else None,
        )
        print(
            f"ack latency, {_store(args)}, {args.threads} active threads, {ack['deliveries']} deliveries in bursts of "
            f"{args.burst_size}: p50 {ack['p50_ms']:.1f} ms, p99 {ack['p99_ms']:.1f} ms, "
            f"max {ack['max_ms']:.1f} ms "
            f"(target p99 ≤ 20 ms)"
        )
        ok = ok and ack["p99_ms"] <= 20
    if "runs" in args.only:
        for place in places:
            runs = await run_throughput(
                http, workdirs[place], args.runs, args.latency, replicas=args.replicas, database_url=database,
                lease=args.lease,
            )
            _report_runs(runs, args, place)
            ok = ok and runs["ratio"] <= 1.2
            if args.sample or args.profile:
                probed = await run_throughput(
                    http, workdirs[place], args.runs, args.latency, args.profile, sample=args.sample,
                    database_url=database,
                )
                _report_runs(probed, args, f"{place}, instrumented")
        if args.profile:
            print(f"  profile of the {args.runs}-run phase: {args.profile}.prof")
    return ok


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=100, help="active threads during the ack test")
    p.add_argument("--bursts", type=int, default=40)
    p.add_argument("--burst-size", type=int, default=10)
    p.add_argument("--runs", type=int, default=200, help="concurrent runs in the throughput test")
    p.add_argument("--latency", type=float, default=0.5, help="model latency in seconds")
    p.add_argument("--idle", type=int, default=1000, help="idle sessions for the memory test")
    p.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    p.add_argument("--replicas", type=int, default=1, help="bot replicas (needs --database when more than 1)")
    p.add_argument(
        "--database", metavar="URL|auto", help="run the replicas over Postgres: a postgresql:// URL (its tables are "
        "shared by every scenario), or `auto` for a throwaway server with a fresh database per scenario",
    )
    p.add_argument("--lease", type=float, default=3.0, help="lease_seconds of the replicas (default 3, as serve's)")
    p.add_argument(
        "--storage",
        choices=("disk", "shm", "both"),
        default="disk",
        help="where CREWAGENT_HOME and the project live: a temp dir on disk, /dev/shm (tmpfs), or both in turn "
        "for the run test (every state write is a rename, and renames on this VM's disk cost ~30x tmpfs)",
    )
    p.add_argument(
        "--only", nargs="+", choices=("ack", "runs", "memory", "failover"),
        default=["ack", "runs", "memory", "failover"],
        help="scenarios to run",
    )
    p.add_argument(
        "--metrics", choices=("on", "off", "both"), default="on",
        help="bots keep Prometheus metrics (`metrics:` in crewagent.yml; on by default), not, or both in turn",
    )
    p.add_argument(
        "--profile", metavar="PREFIX", help="cProfile both bot loops during an extra, instrumented concurrent run"
    )
    p.add_argument(
        "--profile-clock", choices=("wall", "cpu"), default="wall",
        help="what --profile counts: wall time (default), or the event loop thread's CPU time (a shared machine)",
    )
    p.add_argument(
        "--sample", action="store_true", help="sample the work loop's stack during an extra concurrent run"
    )
    args = p.parse_args(argv)
    if args.replicas > 1 and not args.database:
        p.error("--replicas above 1 needs --database (URL or auto)")
    if args.replicas > 1 and (args.sample or args.profile or "memory" in args.only):
        p.error("--sample, --profile and the memory test look inside one bot process; add --only ack runs failover")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
