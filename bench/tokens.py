"""Prompt tokens per run, node-scoped context against the full-history baseline, same scripted model.

Runs the bundled examples and a generated linear workflow (40 nodes by default) with two scripted
models, each twice: as the engine composes prompts now (a finished node's turns leave the prompt;
the reads the finishing reply made for the next node stay), and with `full_history` (every earlier
turn re-sent until the history budget trims it, the behaviour before node-scoped context).

- "competent": the reference scripts (tests/support/scripts.py), which trust the NODE_BRIEF;
- "pipelining": the same scripts wrapped by tests/support/pipelining.py: the model reads the state, the
  graph and the step file (frontmatter included) whenever they are not in its prompt, and reads
  them for the next node in the reply that moves the state there.

Per run it reports model calls, total prompt tokens (as the model server counts them: request
bytes / 4, tool specs included), the largest prompt, and the stable prefix: the share of each
prompt that is byte-identical to the start of the previous call's prompt (tool specs first, then
the messages, the order chat templates render them in), summed over calls 2..n and weighted by
prompt size.

    python bench/tokens.py [--nodes 40] [--check]

Targets, for each model: the 40-node run sends at most 25 % of the baseline's prompt tokens; its
last node's first prompt is at most 1.5x the second node's; create-story-micro completes in at
most 9 calls; and for the pipelining model the 40-node run in at most 45. The stable prefix of the
competent model's node-scoped runs averages at least 70 %.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from crewagent.core.base.answers import UserInput  # noqa: E402
from crewagent.core.run.engine import Engine, EngineSettings  # noqa: E402
from crewagent.core.base.events import RunPhase  # noqa: E402
from crewagent.core.model.client import LLMClient, LLMSettings  # noqa: E402
from crewagent.core.package.loader import load_package  # noqa: E402
from crewagent.core.store.run_manager import RunManager  # noqa: E402
from crewagent.core.store.files import RuntimeStore  # noqa: E402
from tests.support.fakes.llm_server import ScriptedLLM  # noqa: E402
from tests.support.linear_package import (  # noqa: E402
    CODENAME_ANSWER,
    first_call_of_each_node,
    linear_responder,
    make_linear_package,
    node_id,
)
from tests.support.pipelining import pipelining  # noqa: E402
from bench.engine_overhead import SCENARIOS  # noqa: E402

EXAMPLES = REPO / "examples"
TARGET_SHARE_OF_BASELINE = 0.25
TARGET_LAST_OVER_SECOND = 1.5
TARGET_STABLE_PREFIX = 0.70
TARGET_STORY_CALLS = 9
TARGET_LINEAR_CALLS_OVER_NODES = 5  # the pipelining model: 40 nodes in at most 45 calls
MODELS = ("competent", "pipelining")


@dataclass
class Workload:
    name: str
    package: Path
    workflow: str | None
    agent: str | None
    responder: Callable[[], Callable[[dict[str, Any]], Any]]
    answers: list[UserInput]  # typed words, or a question's typed answer


@dataclass
class Figures:
    calls: int
    prompt_tokens: int
    largest: int
    stable_prefix: float
    requests: list[dict[str, Any]]


def workloads(work: Path, nodes: int) -> list[Workload]:
    bundled = [
        Workload(s.name, EXAMPLES / s.package, s.workflow, s.agent, s.responder, s.answers) for s in SCENARIOS
    ]
    linear = make_linear_package(work / f"linear-{nodes}", nodes)
    return bundled + [
        Workload(f"linear-{nodes}", linear, None, None, lambda: linear_responder(nodes), [CODENAME_ANSWER])
    ]


def prompt_text(body: dict[str, Any]) -> str:
    """What a provider renders: tool specs first, then the messages."""
    return json.dumps(body.get("tools") or [], ensure_ascii=False) + json.dumps(body["messages"], ensure_ascii=False)


def prompt_tokens(body: dict[str, Any]) -> int:
    return len(json.dumps(body, ensure_ascii=False).encode("utf-8")) // 4


def stable_prefix(requests: list[dict[str, Any]]) -> float:
    texts = [prompt_text(b) for b in requests]
    shared = total = 0
    for before, now in zip(texts, texts[1:]):
        shared += len(os.path.commonprefix([before, now]))
        total += len(now)
    return shared / total if total else 1.0


async def run_once(workload: Workload, work: Path, *, full_history: bool, model: str = "competent") -> Figures:
    responder = workload.responder()
    if model == "pipelining":
        responder = pipelining(responder)
    async with ScriptedLLM(responder=responder) as llm:
        client = LLMClient(LLMSettings(model="scripted", base_url=llm.base_url, max_retries=0))
        try:
            store = RuntimeStore(work / "home")
            runs = RunManager(store)
            engine = Engine(store, runs, client, EngineSettings(full_history=full_history))
            package = load_package(workload.package, cache_dir=store.packages_dir)
            mode = "full" if full_history else "node"
            project = work / f"project-{workload.name.replace('/', '-')}-{model}-{mode}"
            shutil.copytree(EXAMPLES / "sample-project", project)
            record = runs.create(package, workload.workflow, workload.agent, project)
            answers = list(workload.answers)
            intent, user_input = "start", None
            while True:
                result = await engine.pump(record, package, intent=intent, user_input=user_input)  # type: ignore[arg-type]
                if result.phase is not RunPhase.WAITING_USER or not answers:
                    break
                intent, user_input = "continue", answers.pop(0)
            if result.phase is not RunPhase.COMPLETED:
                raise SystemExit(f"{workload.name}: ended {result.phase.value}: {result.error}")
            requests = list(llm.requests)
        finally:
            await client.aclose()
    return Figures(
        calls=record.usage.llm_calls,
        prompt_tokens=record.usage.prompt_tokens,
        largest=max(prompt_tokens(b) for b in requests),
        stable_prefix=stable_prefix(requests),
        requests=requests,
    )


async def main(nodes: int, check: bool) -> int:
    work = Path(tempfile.mkdtemp(prefix="crewagent-tokens-"))
    os.environ["CREWAGENT_HOME"] = str(work / "home")
    results: dict[tuple[str, str], tuple[Figures, Figures]] = {}
    try:
        for model in MODELS:
            for workload in workloads(work, nodes):
                scoped = await run_once(workload, work, full_history=False, model=model)
                full = await run_once(workload, work, full_history=True, model=model)
                results[(model, workload.name)] = (scoped, full)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("Prompt tokens per completed run, scripted models (tokens = request bytes / 4, tool specs included)")
    print(f"{'model':10} {'workflow':30} {'context':12} {'calls':>5} {'prompt tokens':>13} {'largest':>8}"
          f" {'stable prefix':>13}")
    for (model, name), pair in results.items():
        for mode, fig in zip(("node-scoped", "full-history"), pair):
            print(
                f"{model:10} {name:30} {mode:12} {fig.calls:>5} {fig.prompt_tokens:>13,} {fig.largest:>8,}"
                f" {fig.stable_prefix:>12.0%}"
            )
    checks = []
    for model in MODELS:
        scoped, full = results[(model, f"linear-{nodes}")]
        ratio = scoped.prompt_tokens / full.prompt_tokens
        firsts = first_call_of_each_node(scoped.requests)
        second = prompt_tokens(firsts[node_id(2, nodes)])
        last = prompt_tokens(firsts[node_id(nodes, nodes)])
        story_calls = results[(model, "create-story-micro")][0].calls
        checks += [
            (f"{model}: linear-{nodes} prompt tokens vs full history", f"{ratio:.1%}",
             ratio <= TARGET_SHARE_OF_BASELINE, f"<= {TARGET_SHARE_OF_BASELINE:.0%}"),
            (f"{model}: linear-{nodes} last node / second node prompt",
             f"{last:,} / {second:,} = {last / second:.2f}x", last <= TARGET_LAST_OVER_SECOND * second,
             f"<= {TARGET_LAST_OVER_SECOND}x"),
            (f"{model}: create-story-micro calls", str(story_calls), story_calls <= TARGET_STORY_CALLS,
             f"<= {TARGET_STORY_CALLS}"),
        ]
        if model == "pipelining":
            limit = nodes + TARGET_LINEAR_CALLS_OVER_NODES
            checks.append((f"{model}: linear-{nodes} calls", str(scoped.calls), scoped.calls <= limit, f"<= {limit}"))
    scoped_runs = [pair[0] for (model, _), pair in results.items() if model == "competent"]
    shared = sum(f.stable_prefix * f.prompt_tokens for f in scoped_runs) / sum(f.prompt_tokens for f in scoped_runs)
    checks.append(("competent: stable prefix, node-scoped (weighted)", f"{shared:.0%}",
                   shared >= TARGET_STABLE_PREFIX, f">= {TARGET_STABLE_PREFIX:.0%}"))
    print()
    for label, value, ok, target in checks:
        print(f"{label:56} {value:>24}  target {target:6} {'ok' if ok else 'MISSED'}")
    return 0 if all(ok for *_, ok, _ in checks) or not check else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=40, help="nodes of the generated linear workflow (default 40)")
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.nodes, args.check)))
