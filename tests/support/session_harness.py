"""Shared helpers for the session tests (no tests here): a SessionService over the real engine,
the ScriptedLLM on loopback, and a "menu lab" package with one menu item per command kind."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from crewagent.core.base import answers
from crewagent.core.base.errors import CrewError
from crewagent.core.session.outputs import Output
from crewagent.core.package.loader import load_package
from crewagent.core.package.models import Package
from crewagent.core.session.model import Session
from crewagent.core.session.service import SessionService
from tests.support.scripts import EXAMPLES, EngineHarness, engine_harness

LAB_ITEMS: list[dict[str, Any]] = [
    {"trigger": "linear-by-path", "description": "Start hello-linear by its path",
     "workflow": "workflows/hello-linear/workflow.md"},
    {"trigger": "exec-linear", "description": "Start hello-linear through exec",
     "exec": "workflows/hello-linear/workflow.md"},
    {"trigger": "brainstorm", "description": "Brainstorm ideas with a script",
     "exec": "scripts/brainstorm.md", "data": "assets/context.json"},
    {"trigger": "review", "description": "[RV] Review with the checklist", "action": "#review"},
    {"trigger": "ghost", "description": "A prompt that does not exist", "action": "#ghost"},
    {"trigger": "show-menu", "description": "Show the menu again", "action": "menu.show"},
    {"trigger": "bye", "description": "Dismiss Mary", "action": "agent.dismiss"},
    {"trigger": "resume-last", "description": "Resume the last run", "action": "run.resume"},
    {"trigger": "tips", "description": "Quick tips", "action": "List three quick tips about writing requirements.",
     "data": "{project-root}/project-context.md"},
    {"trigger": "broken-data", "description": "Uses a broken data file", "action": "Summarise it.",
     "data": "assets/broken.json"},
    {"trigger": "missing-data", "description": "Uses a missing data file", "action": "Summarise it.",
     "data": "assets/missing.yaml"},
    {"trigger": "checked-linear", "description": "Start hello-linear after a check", "workflow": "hello-linear",
     "validate-workflow": "assets/review-checklist.md"},
    {"trigger": "checked-missing", "description": "Start hello-linear with a missing checklist",
     "workflow": "hello-linear", "validate-workflow": "assets/nope-checklist.md"},
    {"trigger": "classic", "description": "A classic BMAD workflow", "workflow": "legacy/workflow.yaml"},
    {"trigger": "ide-tool", "description": "Only in the IDE", "action": "Say hi.", "ide-only": True},
    {"trigger": "linear-with-data", "description": "Start hello-linear with context", "workflow": "hello-linear",
     "data": "{project-root}/project-context.md"},
]

BRAINSTORM_SCRIPT = "# Brainstorm\n\nAsk for a topic, then list five ideas (marker: BRAINSTORM-SCRIPT-7).\n"


def make_lab_package(root: Path) -> Path:
    """multi-workflows plus one analyst menu item per command kind, a script, data files and a prompt."""
    dest = root / "menu-lab"
    shutil.copytree(EXAMPLES / "multi-workflows", dest)
    agents_file = dest / "agents.json"
    agents = json.loads(agents_file.read_text(encoding="utf-8"))
    analyst = agents["agents"][0]
    assert analyst["id"] == "analyst"
    analyst["menu"] += LAB_ITEMS
    analyst["prompts"] = [{"id": "review", "content": "Review the artifact against the checklist (marker: PROMPT-RV-3)."}]
    agents_file.write_text(json.dumps(agents, indent=2), encoding="utf-8")
    (dest / "scripts").mkdir()
    (dest / "scripts" / "brainstorm.md").write_text(BRAINSTORM_SCRIPT, encoding="utf-8")
    (dest / "assets" / "context.json").write_text(json.dumps({"team": "TaskNest", "sprint": 4, "goals": ["auth"]}))
    (dest / "assets" / "broken.json").write_text('{"team": "TaskNest",,}')
    return dest


@dataclass
class SessionHarness:
    h: EngineHarness
    service: SessionService
    session: Session
    live: list[Output] = field(default_factory=list)

    async def emit(self, output: Output) -> None:
        self.live.append(output)

    async def text(self, text: str) -> list[Output]:
        return await self.service.handle_text(self.session, text, self.emit)

    async def open(self, text: str = "") -> list[Output]:
        return await self.service.open(self.session, text, self.emit)

    async def pick(self, agent: str) -> list[Output]:
        return await self.service.pick_agent(self.session, agent, self.emit)

    async def submit(self, widget_id: str, value: Any) -> list[Output]:
        """Answer as a surface does: typed as the open question's kind (when none is open, the first
        kind `value` can be an answer of: a stale click on an old question)."""
        pending = self.session.pending_widget
        kinds = [pending.type] if pending else ["selection", "confirmation", "plan_review", "form"]
        for kind in kinds[:-1]:
            try:
                return await self.answer(answers.form_answer(widget_id, kind, value))
            except CrewError:  # not an answer of this kind: try the next
                pass
        return await self.answer(answers.form_answer(widget_id, kinds[-1], value))

    async def answer(self, answer: answers.FormAnswer) -> list[Output]:
        return await self.service.handle_widget_submit(self.session, answer, self.emit)

    async def control(self, action: str) -> list[Output]:
        return await self.service.control(self.session, action, self.emit)  # type: ignore[arg-type]

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self.h.llm.requests


@asynccontextmanager
async def session_harness(
    project: Path, *packages: str | Path, surface: str = "web"
) -> AsyncIterator[SessionHarness]:
    """Packages by example name (create-story-micro, ...) or by directory."""
    async with engine_harness(project) as h:
        loaded: list[Package] = [
            h.load(p) if isinstance(p, str) else load_package(p, cache_dir=h.store.packages_dir) for p in packages
        ]
        service = SessionService(loaded, project, h.engine, h.runs, surface=surface)  # type: ignore[arg-type]
        yield SessionHarness(h, service, Session(id="test:1"))


def kinds(outputs: list[Output]) -> list[str]:
    return [o.kind for o in outputs]


def of_kind(outputs: list[Output], kind: str) -> list[Any]:
    return [o for o in outputs if o.kind == kind]


def request_text(body: dict[str, Any]) -> str:
    """Every message content of one LLM request, joined."""
    return "\n".join(str(m.get("content") or "") for m in body.get("messages") or [])


def tool_names(body: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in body.get("tools") or []]
