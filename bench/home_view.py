"""The Home tab of a person with many runs: how long building their view takes.

Sets up an embedded store (run index, run folders, thread store) with `--runs` runs owned by one
person (a few waiting, a few running or paused, the rest completed) and `--others` runs of other
people, each run in a thread of its own with a realistic session (a chat history of 20 messages),
then builds that person's view `--repeat` times: the threads by owner (the indexed query), their
runs from the index, the state files of the runs shown, and the Block Kit view as JSON. Prints
the median and worst wall and CPU time per view; the target is under 50 ms for 500 runs.

    python bench/home_view.py [--runs 500] [--others 1500] [--repeat 30]
"""

from __future__ import annotations

import argparse
import asyncio
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

from crewagent.bot.access import AccessPolicy  # noqa: E402
from crewagent.bot.home.overview import RunOverview  # noqa: E402
from crewagent.bot.home.tab import AgentEntry, HomeContext, home_view  # noqa: E402
from crewagent.bot.base.thread import ThreadKey, ThreadRecord  # noqa: E402
from crewagent.bot.threads.store import ThreadStore  # noqa: E402
from crewagent.core.base.events import RunPhase  # noqa: E402
from crewagent.core.package.loader import load_package  # noqa: E402
from crewagent.core.store.files import INDEX_FILE, RuntimeStore  # noqa: E402
from crewagent.core.store.run_manager import RunManager  # noqa: E402
from crewagent.core.store.runs_model import RunUsage  # noqa: E402

USER = "UMANY"


def seed(home: Path, project: Path, runs: int, others: int) -> tuple[RuntimeStore, list[ThreadRecord]]:
    """One real run (its state folder copied for the person's runs), the index written in one go."""
    store = RuntimeStore(home)
    manager = RunManager(store)
    package = load_package(REPO / "examples" / "hello-branch", cache_dir=store.packages_dir)
    template = manager.create(package, None, None, project, session_id="seed")
    template_dir = store.run_dir(template)
    items, threads = [], []
    history = [{"role": "user" if i % 2 == 0 else "assistant", "content": "x" * 400} for i in range(20)]
    for n in range(runs + others):
        owner = USER if n < runs else f"UOTHER{n % 40}"
        key = ThreadKey("T1", f"C{n % 7}", f"1700000000.{n:06d}")
        record = template.model_copy(deep=True)
        record.run_id = f"run-{n:05d}-0000-0000-0000-000000000000"
        record.session_id = key.session_id
        record.created_at = record.updated_at = f"2026-01-{1 + n % 28:02d}T10:00:00.000Z"
        record.usage = RunUsage(llm_calls=8, prompt_tokens=20_000, completion_tokens=1_500)
        record.phase, record.paused = (
            (RunPhase.WAITING_USER, False) if n % 50 == 0 else
            (RunPhase.WAITING_USER, True) if n % 50 == 1 else
            (RunPhase.COMPLETED, False)
        )
        items.append(record.model_dump(mode="json"))
        if owner == USER:
            shutil.copytree(template_dir, store.run_dir(record))
        thread = ThreadRecord.new(key, owner=owner, binding="default")
        thread.session.run_id = record.run_id
        thread.session.package_id = package.id
        thread.session.mode = "run"
        thread.session.history = history
        threads.append(thread)
    text = '{"version": 1, "runs": [\n' + ",\n".join(json.dumps(i, separators=(",", ":")) for i in items) + "\n]}\n"
    (home / INDEX_FILE).write_text(text, encoding="utf-8")
    return RuntimeStore(home), threads  # a fresh store: nothing cached from the seeding


async def main(runs: int, others: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, project = Path(tmp) / "home", Path(tmp) / "project"
        project.mkdir()
        store, threads = await asyncio.to_thread(seed, home, project, runs, others)
        thread_store = ThreadStore(home / "slack")
        await thread_store.open()
        for thread in threads:
            await thread_store.put(thread)
        package = load_package(REPO / "examples" / "hello-branch", cache_dir=store.packages_dir)
        overview = RunOverview(thread_store, RunManager(store), AccessPolicy(), lambda _b, _p: package)
        agents = [AgentEntry(a.id, a.metadata.name, a.metadata.title, a.metadata.icon, ("hello-branch",))
                  for a in package.agents]
        ctx = HomeContext(user=USER, workspace_url="https://acme.slack.com/")
        walls, cpus, blocks = [], [], 0
        for _ in range(repeat):
            wall, cpu = time.perf_counter(), time.process_time()
            data = await overview.build(USER)
            payload = json.dumps(home_view(data, agents, ctx).to_dict())
            walls.append((time.perf_counter() - wall) * 1000)
            cpus.append((time.process_time() - cpu) * 1000)
            blocks = len(json.loads(payload)["blocks"])
        await thread_store.close()
    load = os.getloadavg()[0]
    print(f"runs of the person: {runs}, of others: {others}; view: {blocks} blocks; {data.runs_total} runs counted")
    print(f"wall ms per view: median {statistics.median(walls):.1f}, worst {max(walls):.1f}")
    print(f"CPU ms per view (all threads): median {statistics.median(cpus):.1f}, worst {max(cpus):.1f}")
    print(f"load average (1 min): {load:.1f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--others", type=int, default=1500)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.others, args.repeat))
