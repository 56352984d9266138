"""The agent view: suggested prompts when someone opens the bot's DM, and titles for its threads.

The prompts name the bound packages' agents and their most used workflow menu items (most runs
started in the project, menu order when nothing ran yet); clicking one sends its text as a DM,
which opens a thread like any other top-level DM. A thread's title names its agent, then its
workflow once a run starts.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from crewagent.core.api.packages import Package
from crewagent.core.api.runs import RunRecord

MAX_PROMPTS = 4  # Slack shows up to four
AGENT_PROMPTS = 2
TITLE_LIMIT = 75
PROMPTS_TITLE = "Start with an agent or a workflow"
REFRESH_SECONDS = 600.0  # one user's prompts are set again at most this often


def _short(text: str) -> str:
    return text if len(text) <= TITLE_LIMIT else text[: TITLE_LIMIT - 1].rstrip() + "…"


def suggested_prompts(packages: Sequence[Package], runs: Sequence[RunRecord]) -> list[dict[str, str]]:
    """[{title, message}]: a couple of agents, then the most used workflow items."""
    agents = [(p, a) for p in packages for a in p.agents if a.menu]
    prompts = [
        {"title": _short(f"{a.metadata.icon} Talk to {a.metadata.name} ({a.metadata.title})"), "message": a.metadata.name}
        for _, a in agents[:AGENT_PROMPTS]
    ]
    used = Counter((r.package_id, r.workflow_id) for r in runs)
    items: list[tuple[int, int, dict[str, str]]] = []
    seen: set[str] = set()
    for order, (package, agent) in enumerate(agents):
        for item in agent.menu:
            ref = item.workflow or ""
            workflow = (package.workflow(ref) or package.workflow_by_path(ref)) if ref else None
            if workflow is None or not item.trigger or item.trigger in seen:
                continue
            seen.add(item.trigger)
            title = _short(f"{agent.metadata.name}: {item.description}")
            items.append((-used[(package.id, workflow.id)], order, {"title": title, "message": item.trigger}))
    items.sort(key=lambda entry: entry[:2])
    prompts += [prompt for *_, prompt in items[: MAX_PROMPTS - len(prompts)]]
    return prompts[:MAX_PROMPTS]


def thread_title(agent: str | None, workflow: str | None = None) -> str | None:
    """What the DM's thread list shows for a conversation."""
    if workflow and agent:
        return _short(f"{workflow} · {agent}")
    return _short(workflow or agent) if (workflow or agent) else None


class PromptPacer:
    """Opening the DM fires an event each time; each user's prompts are refreshed now and then only."""

    def __init__(self, every: float = REFRESH_SECONDS, kept: int = 10_000) -> None:
        self.every, self.kept = every, kept
        self._last: dict[str, float] = {}

    def due(self, user: str) -> bool:
        now = time.monotonic()
        if now - self._last.get(user, -self.every) < self.every:
            return False
        self._last[user] = now
        if len(self._last) > self.kept:
            oldest = sorted(self._last, key=self._last.__getitem__)[: len(self._last) - self.kept]
            for name in oldest:
                del self._last[name]
        return True
