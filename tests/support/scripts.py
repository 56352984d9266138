"""Scripted "competent model" conversations for the example packages, driving ScriptedLLM.

Each `script_*` function installs a *responder* on a ScriptedLLM: a function that reads the request
the engine sent (the NODE_BRIEF's current node, its STATE_SUMMARY, the latest USER_INPUT, the
results of the previous tool round) and answers like a model that follows the step files. Because
it reacts to the request instead of replaying a fixed list, the same script works after a pause,
a stop, a crash/resume, or when a test answers questions at different moments.

    async with ScriptedLLM() as llm:
        script_create_story(llm)
        results = await drive(engine, record, package, answers=[STORY_KEY])
        assert results[-1].phase is RunPhase.COMPLETED

Reference traces (LLM calls per completed run):
- create-story-micro (sample project, no sprint-status.yaml): 9 calls — list the project, ask for
  the story key (the one stop), step-01 … step-04 (step-03 reads then writes), step-05 and end-99
  in one turn, then the closing message in the post-completion profile.
- hello-branch: 8 calls — look at the project, write the intake, ask greenfield/brownfield with a
  `ui_ask_user` selection widget (the stop), record the decision, read, write the plan, finish,
  closing message. Answer with `project_type_answer("greenfield" | "brownfield")`.
- multi-workflows / hello-linear: 5 calls — ask topic + format (the stop), write the input, the
  architect persona writes the result (persona switch at step-02), finish, closing message.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from crewagent.core.run.engine import Engine, EngineSettings, PumpResult
from crewagent.core.base.events import EngineEvent, RunPhase
from crewagent.core.model.client import LLMClient, LLMSettings
from crewagent.core.package.loader import load_package
from crewagent.core.package.models import Package
from crewagent.core.base.answers import FormAnswer, SelectionAnswer, UserInput
from crewagent.core.base.wrappers import WIDGET_SUBMIT, unwrap_user_input
from crewagent.core.store.run_manager import RunManager
from crewagent.core.store.runs_model import RunRecord
from crewagent.core.store.files import RuntimeStore
from tests.support.fakes.llm_server import Reply, ScriptedLLM
from tests.support.paths import EXAMPLES


STORY_KEY = "1-2-user-authentication"
"""What the user answers when create-story-micro asks which story to prepare."""

CREATE_STORY_ARTIFACTS = [
    "artifacts/create-story/target.md",
    "artifacts/create-story/inputs.md",
    "artifacts/create-story/context.md",
    f"artifacts/stories/{STORY_KEY}.md",
    "artifacts/create-story/sprint-status-update.md",
    "artifacts/create-story/summary.md",
]
"""The six artifacts of a completed create-story-micro run, in the order they are written."""

HELLO_LINEAR_ANSWER = "I want a team weekly-report template, bullet format"
"""What the user answers to hello-linear's two questions (topic + format)."""

STATE = "@state/workflow.md"
Body = dict[str, Any]
Call = tuple[str, dict[str, Any]]


# ---- reading a request --------------------------------------------------------------


def messages(body: Body) -> list[dict[str, Any]]:
    return list(body.get("messages") or [])


def system_text(body: Body) -> str:
    """All system messages of one request, joined (base rules, tool policy, persona, mode)."""
    return "\n\n".join(str(m.get("content") or "") for m in messages(body) if m.get("role") == "system")


def user_texts(body: Body) -> list[str]:
    return [str(m.get("content") or "") for m in messages(body) if m.get("role") == "user"]


def node_brief(body: Body) -> str | None:
    """The NODE_BRIEF message of the request, or None (post-completion profile, conversations)."""
    return next((t for t in user_texts(body) if t.startswith("NODE_BRIEF")), None)


def current_node(body: Body) -> str | None:
    brief = node_brief(body)
    if brief is None:
        return None
    match = re.search(r"^- currentNodeId: (\S+)", brief, re.M)
    return match.group(1) if match else None


def state_summary(body: Body) -> dict[str, Any]:
    brief = node_brief(body) or ""
    _, _, tail = brief.partition("STATE_SUMMARY\n")
    try:
        return json.loads(tail.splitlines()[0]) if tail else {}
    except (ValueError, IndexError):
        return {}


def is_post_completion(body: Body) -> bool:
    return any(t.startswith("RUN_DIRECTIVE") and "Protocol (post-run)" in t for t in user_texts(body))


def user_inputs(body: Body) -> list[str]:
    """The raw texts of every USER_INPUT in the history, oldest first."""
    return [unwrap_user_input(t) for t in user_texts(body) if t.startswith("USER_INPUT")]


def previous_calls(body: Body) -> list[Call]:
    """The tool calls of the model's previous turn, if this request continues that tool round."""
    msgs = messages(body)
    i = len(msgs) - 1
    while i >= 0 and msgs[i].get("role") != "assistant":
        if msgs[i].get("role") == "user" and not str(msgs[i].get("content", "")).startswith("RUNTIME_NOTE"):
            return []  # the user spoke after the last round
        i -= 1
    if i < 0:
        return []
    calls: list[Call] = []
    for call in msgs[i].get("tool_calls") or []:
        fn = call.get("function", {})
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except ValueError:
            args = {}
        calls.append((str(fn.get("name")), args if isinstance(args, dict) else {}))
    return calls


def previous_results(body: Body) -> list[dict[str, Any]]:
    """Parsed tool results that follow the model's previous turn."""
    out: list[dict[str, Any]] = []
    for msg in reversed(messages(body)):
        if msg.get("role") != "tool":
            break
        try:
            out.append(json.loads(msg.get("content") or "{}"))
        except ValueError:
            out.append({"ok": False, "raw": msg.get("content")})
    return list(reversed(out))


def ended_with_closing_note(body: Body) -> bool:
    msgs = messages(body)
    return bool(msgs) and msgs[-1].get("role") == "user" and "RUNTIME_NOTE" in str(msgs[-1].get("content"))


# ---- building replies ---------------------------------------------------------------


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def write(path: str, content: str) -> Call:
    return ("fs_write", {"path": path, "content": content})


def patch_state(update: dict[str, Any]) -> Call:
    """An fs_apply_patch `updateFrontmatter` call on the run state; `updatedAt` is added."""
    full = {**update, "updatedAt": {"set": now()}}
    return ("fs_apply_patch", {"path": STATE, "patch": {"operation": "updateFrontmatter", "update": full}})


def complete_node(node: str, *, to: str | None, variables: dict[str, Any] | None = None,
                  artifacts: Sequence[str] = (), decision: dict[str, Any] | None = None) -> Call:
    update: dict[str, Any] = {"stepsCompleted": {"append": [node]}}
    if to is not None:
        update["currentNodeId"] = {"set": to}
    if variables:
        update["variables"] = {"set": variables}
    if artifacts:
        update["artifacts"] = {"append": list(artifacts)}
    if decision:
        update["decisionLog"] = {"append": [decision]}
    return patch_state(update)


def calls(*items: Call, content: str | None = None) -> Reply:
    return Reply(content=content, tool_calls=tuple(items))


def _post_completion_reply(body: Body, closing: str) -> Reply:
    if ended_with_closing_note(body) or previous_calls(body):
        return Reply(content=closing)
    return Reply(content="The workflow is complete. I can review the artifacts or explain any of them.")


# ---- create-story-micro -----------------------------------------------------------------

_KEY = re.compile(r"\b(\d+)-(\d+)-([a-z0-9][a-z0-9-]*)\b")


def create_story_responder(story_key: str = STORY_KEY) -> Callable[[Body], Reply]:
    """The competent model for create-story-micro on examples/sample-project (see module doc)."""

    def respond(body: Body) -> Reply:
        if is_post_completion(body):
            return _post_completion_reply(
                body,
                f"Done. Story `artifacts/stories/{story_key}.md` is ready for design.\n"
                "- Artifacts: target, inputs, context, story, sprint-status update, summary\n"
                "- Next: fill the Design section, then run dev-story.",
            )
        node = current_node(body)
        prev = [name for name, _ in previous_calls(body)]
        variables = state_summary(body).get("variables", {})
        key = variables.get("storyKey") or story_key
        story = f"artifacts/stories/{key}.md"
        if node == "step-01-select-story":
            given = next((m for t in reversed(user_inputs(body)) if (m := _KEY.search(t))), None)
            if given:
                epic, num, title = given.groups()
                return calls(
                    write(
                        "@project/artifacts/create-story/target.md",
                        f"# Target story\n\n- storyKey: {given.group(0)}\n- epicNum: {epic}\n- storyNum: {num}\n"
                        f"- storyTitle: {title}\n- sprintStatusPath: (not found)\n"
                        "- selectionReason: story key given by the user\n",
                    ),
                    complete_node(
                        node,
                        to="step-02-discover-inputs",
                        variables={"storyKey": given.group(0), "epicNum": epic, "storyNum": num,
                                   "storyTitle": title, "sprintStatusPath": ""},
                        artifacts=["artifacts/create-story/target.md"],
                    ),
                )
            if "fs_list" in prev:
                return Reply(
                    content="There is no sprint-status.yaml in the project. Which story should I prepare? "
                    "Give its key, for example `1-2-user-authentication`."
                )
            return calls(("fs_list", {"path": "@project/artifacts"}), ("fs_list", {"path": "@project"}))
        if node == "step-02-discover-inputs":
            return calls(
                write(
                    "@project/artifacts/create-story/inputs.md",
                    f"# Story inputs: {key}\n\n## Found\n- epics: artifacts/epics.md\n- PRD: artifacts/PRD.md\n"
                    "- architecture: artifacts/architecture.md\n- UX: artifacts/ux.md\n"
                    "- project context: project-context.md\n\n## Missing\n- (none)\n",
                ),
                complete_node(
                    node,
                    to="step-03-extract-context",
                    variables={"epicsPath": "artifacts/epics.md", "prdPath": "artifacts/PRD.md",
                               "architecturePath": "artifacts/architecture.md", "uxPath": "artifacts/ux.md",
                               "projectContextPath": "project-context.md"},
                    artifacts=["artifacts/create-story/inputs.md"],
                ),
            )
        if node == "step-03-extract-context":
            if "fs_search" not in prev:
                epic, num = variables.get("epicNum", "1"), variables.get("storyNum", "2")
                return calls(
                    ("fs_search", {"path": "@project/artifacts/epics.md", "pattern": f"Story {epic}.{num}",
                                   "after": 20}),
                    ("fs_read", {"path": "@project/artifacts/architecture.md"}),
                    ("fs_read", {"path": "@project/project-context.md"}),
                    ("fs_read", {"path": "@project/artifacts/ux.md"}),
                    ("fs_read", {"path": "@project/artifacts/PRD.md"}),
                    ("fs_read", {"path": "@pkg/assets/story-template.md"}),
                )
            found = next((r for r in previous_results(body) if r.get("matches")), {})
            heading = (found.get("matches") or [{}])[0].get("text", f"Story for {key}")
            return calls(
                write(
                    "@project/artifacts/create-story/context.md",
                    f"# Story context: {key}\n\n## Story foundation\n- {heading.strip()}\n\n"
                    "## Developer guardrails\n### Tech stack and versions\n- as in artifacts/architecture.md\n\n"
                    "## References\n- artifacts/epics.md\n- artifacts/architecture.md\n\n## Open questions\n- (none)\n",
                ),
                complete_node(node, to="step-04-generate-story",
                              variables={"storySummary": f"Delivers {key} for TaskNest users."},
                              artifacts=["artifacts/create-story/context.md"]),
            )
        if node == "step-04-generate-story":
            return calls(
                write(f"@project/{story}", f"# Story {key}\n\nStatus: ready-for-design\n\n## Design\n[TBD]\n"),
                complete_node(node, to="step-05-update-sprint-status", variables={"storyFile": story},
                              artifacts=[story]),
            )
        summary_calls = (
            write(
                "@project/artifacts/create-story/summary.md",
                f"# Create story: summary\n\n## Story\n- key: {key}\n- file: {story}\n- status: ready-for-design\n\n"
                "## Next actions\n- Fill the Design section.\n- Run sprint planning.\n",
            ),
            complete_node("end-99", to=None, variables={"workflowStatus": "complete"},
                          artifacts=["artifacts/create-story/summary.md"]),
        )
        if node == "step-05-update-sprint-status":
            return calls(
                write(
                    "@project/artifacts/create-story/sprint-status-update.md",
                    f"# Sprint status update: {key}\n\n- result: skipped\n- file: (not found)\n- change: none\n"
                    "- reason: no sprint-status.yaml in the project\n",
                ),
                complete_node(node, to="end-99", variables={"sprintStatusResult": "skipped"},
                              artifacts=["artifacts/create-story/sprint-status-update.md"]),
                *summary_calls,
            )
        if node == "end-99":
            return calls(*summary_calls)
        return Reply(content=f"(scripted model: no plan for node {node!r})")

    return respond


def script_create_story(llm: ScriptedLLM, *, story_key: str = STORY_KEY) -> None:
    """Answer every request of a create-story-micro run like the reference trace (9 calls).

    The run stops once, at step-01, asking for the story key; continue it with `story_key`.
    """
    llm.responder = create_story_responder(story_key)


# ---- hello-branch (also multi-workflows/hello-branch) ------------------------------------------

PROJECT_TYPE_WIDGET = {
    "widgetId": "project_type",
    "type": "selection",
    "message": "Is this a new system (greenfield) or a change to an existing one (brownfield)?",
    "options": [
        {"value": "greenfield", "label": "Greenfield", "description": "New system, built from scratch"},
        {"value": "brownfield", "label": "Brownfield", "description": "Extend or change an existing system"},
    ],
    "multi": False,
}


def project_type_answer(branch: str) -> FormAnswer:
    """The answer a surface gives when the user picks `branch` in the project_type widget."""
    return SelectionAnswer(widget_id="project_type", value=[branch])


def parse_widget_submit(text: str | None) -> dict[str, Any] | None:
    """{widgetId, type, value} of a WIDGET_SUBMIT user message, as a model reads it (USER_INPUT-wrapped or not)."""
    raw = unwrap_user_input(text or "").strip()
    if not raw.startswith(WIDGET_SUBMIT):
        return None
    try:
        payload = json.loads(raw[len(WIDGET_SUBMIT):].strip())
    except ValueError:
        return None
    return payload if isinstance(payload, dict) and isinstance(payload.get("widgetId"), str) else None


def hello_branch_responder(*, preset_branch: str | None = None) -> Callable[[Body], Reply]:
    """The competent model for hello-branch. It asks greenfield/brownfield with a selection widget
    unless `preset_branch` is given (then it decides on its own and the run never stops)."""

    def respond(body: Body) -> Reply:
        if is_post_completion(body):
            return _post_completion_reply(
                body, "Finished.\n- Plan and summary are under artifacts/\n- Next: review the plan's open questions."
            )
        node = current_node(body)
        prev = [name for name, _ in previous_calls(body)]
        variables = state_summary(body).get("variables", {})
        if node == "step-01-intake":
            if "fs_list" not in prev:
                return calls(("fs_list", {"path": "@project"}), ("fs_read", {"path": "@project/README.md"}))
            return calls(
                write(
                    "@project/artifacts/intake.md",
                    "# Intake: TaskNest\n\n## What the user wants\nA shared task board.\n\n## Existing system\n"
                    "Planning documents only; no source code found.\n\n## Open questions\n"
                    "- Is there an existing system to extend?\n",
                ),
                complete_node(node, to="decide-02-project-type", variables={"projectName": "TaskNest"},
                              artifacts=["artifacts/intake.md"]),
            )
        if node == "decide-02-project-type":
            branch = preset_branch
            for text in reversed(user_inputs(body)):
                submitted = parse_widget_submit(text)
                if submitted and submitted.get("widgetId") == "project_type":
                    value = submitted.get("value")
                    branch = value[0] if isinstance(value, list) and value else str(value)
                    break
            if branch is None:
                return calls(("ui_ask_user", PROJECT_TYPE_WIDGET))
            target = "step-03a-greenfield" if branch == "greenfield" else "step-03b-brownfield"
            return calls(
                complete_node(
                    node,
                    to=target,
                    variables={"projectType": branch},
                    decision={"from": node, "to": target, "label": branch,
                              "reason": f"The user chose {branch}; the intake found no code.", "decidedAt": now()},
                )
            )
        if node in ("step-03a-greenfield", "step-03b-brownfield"):
            kind = "greenfield" if node.endswith("greenfield") else "brownfield"
            plan = f"artifacts/plan-{kind}.md"
            if "fs_read" not in prev:
                return calls(("fs_read", {"path": "@project/artifacts/intake.md"}),
                             ("fs_read", {"path": "@pkg/assets/plan-template.md"}))
            return calls(
                write(f"@project/{plan}", f"# Plan ({kind})\n\n## Overview\nTaskNest.\n\n## First increments\n1. Skeleton\n"),
                complete_node(node, to="end-99", variables={"planPath": plan}, artifacts=[plan]),
            )
        if node == "end-99":
            plan = variables.get("planPath", "artifacts/plan.md")
            return calls(
                write("@project/artifacts/summary.md",
                      f"# Hello Branch: summary\n\n- branch taken: {variables.get('projectType')}\n- plan: {plan}\n"),
                complete_node(node, to=None, variables={"workflowStatus": "complete"},
                              artifacts=["artifacts/summary.md"]),
            )
        return Reply(content=f"(scripted model: no plan for node {node!r})")

    return respond


def script_hello_branch(llm: ScriptedLLM, *, preset_branch: str | None = None) -> None:
    """Answer a hello-branch run (single package or multi-workflows' hello-branch): 8 calls.

    It stops once with the `project_type` selection widget; continue with `project_type_answer(...)`.
    """
    llm.responder = hello_branch_responder(preset_branch=preset_branch)


# ---- multi-workflows / hello-linear --------------------------------------------------------------


def hello_linear_responder() -> Callable[[Body], Reply]:
    """The competent model for hello-linear: asks two questions, then autopilot to the end."""

    def respond(body: Body) -> Reply:
        if is_post_completion(body):
            return _post_completion_reply(
                body, "- Topic: team weekly-report template\n- Format: bullet list\n"
                "- Result: artifacts/hello-linear/result.md (tell me if you want changes)"
            )
        node = current_node(body)
        answers = [t for t in user_inputs(body) if t.strip()]
        if node == "step-01-ask":
            if not answers:
                return Reply(content="1. What is the topic?\n2. What output format do you want?")
            return calls(
                write("@project/artifacts/hello-linear/input.md",
                      f'# Hello Linear: input\n\n- topic: team weekly-report template\n- outputFormat: bullet list\n'
                      f'- userRequest: "{answers[-1]}"\n'),
                complete_node(node, to="step-02-generate",
                              variables={"topic": "team weekly-report template", "outputFormat": "bullet list"},
                              artifacts=["artifacts/hello-linear/input.md"]),
            )
        if node == "step-02-generate":
            return calls(
                write("@project/artifacts/hello-linear/result.md",
                      "# Team weekly report\n\n- Done\n- Next\n- Risks\n\n## Notes\n- Weekly cadence assumed.\n"),
                complete_node(node, to="end-99", variables={"resultPath": "artifacts/hello-linear/result.md"},
                              artifacts=["artifacts/hello-linear/result.md"]),
            )
        if node == "end-99":
            return calls(complete_node(node, to=None, variables={"workflowStatus": "complete"}))
        return Reply(content=f"(scripted model: no plan for node {node!r})")

    return respond


def script_hello_linear(llm: ScriptedLLM) -> None:
    """Answer a multi-workflows hello-linear run: 5 calls; one stop at step-01 (answer with
    HELLO_LINEAR_ANSWER); step-02 runs as the architect (persona switch)."""
    llm.responder = hello_linear_responder()


# ---- hello-subflow: plan-feature calls party-mode as a sub-workflow ------------------------------

FEATURE_ANSWER = "Recurring tasks: repeat a task every week"
"""What the user answers when plan-feature asks which feature to plan."""

DIRECTION_WIDGET = {
    "widgetId": "direction",
    "type": "selection",
    "message": "Which direction should the plan take?",
    "options": [
        {"value": "simple-rules", "label": "Simple repeat rules", "description": "daily / weekly / monthly"},
        {"value": "calendar-sync", "label": "Calendar sync", "description": "repeat from the user's calendar"},
        {"value": "another-round", "label": "Another round"},
    ],
    "multi": False,
}
PARTY_ARTIFACTS = ["artifacts/party-mode/discussion.md", "artifacts/party-mode/verdict.md"]
PLAN_FEATURE_ARTIFACTS = ["artifacts/plan-feature/brief.md", *PARTY_ARTIFACTS, "artifacts/plan-feature/plan.md"]


def direction_answer(value: str = "simple-rules") -> FormAnswer:
    return SelectionAnswer(widget_id="direction", value=[value])


def _chosen_direction(body: Body) -> str | None:
    for text in reversed(user_inputs(body)):
        submitted = parse_widget_submit(text)
        if submitted and submitted.get("widgetId") == "direction":
            value = submitted.get("value")
            return value[0] if isinstance(value, list) and value else str(value)
    return None


def hello_subflow_responder() -> Callable[[Body], Reply]:
    """The competent model for hello-subflow (7 calls): ask for the feature (stop), write the brief;
    the party-mode child writes the discussion, asks for a direction with a widget (stop), records it
    and wraps up; the caller writes the plan and finishes; closing message."""

    def respond(body: Body) -> Reply:
        if is_post_completion(body):
            return _post_completion_reply(body, "Planned.\n- Plan: artifacts/plan-feature/plan.md\n- Next: review it.")
        node = current_node(body)
        variables = state_summary(body).get("variables", {})
        if node == "step-01-brief":
            answers = [t for t in user_inputs(body) if t.strip()]
            if not answers:
                return Reply(content="Which feature should we plan, and what problem does it solve?")
            return calls(
                write("@project/artifacts/plan-feature/brief.md", f"# Brief\n\n- feature: {answers[-1]}\n"),
                complete_node(node, to="sub-02-party-mode", variables={"featureName": "recurring-tasks"},
                              artifacts=["artifacts/plan-feature/brief.md"]),
            )
        if node == "party-01-voices":
            topic = variables.get("featureName", "(topic missing)")
            return calls(
                write("@project/artifacts/party-mode/discussion.md",
                      f"# Round-table: {topic}\n\n## Architect\n- simple rules\n\n## UX\n- calendar sync\n"),
                complete_node(node, to="party-02-choose",
                              variables={"discussionPath": "artifacts/party-mode/discussion.md", "topic": topic},
                              artifacts=["artifacts/party-mode/discussion.md"]),
            )
        wrap = (
            write("@project/artifacts/party-mode/verdict.md", "# Verdict\n\n- direction chosen by the user\n"),
            complete_node("party-99-wrap", to=None, variables={"workflowStatus": "complete"},
                          artifacts=["artifacts/party-mode/verdict.md"]),
        )
        if node == "party-02-choose":
            direction = _chosen_direction(body)
            if direction is None:
                return calls(("ui_ask_user", DIRECTION_WIDGET), content="Time to pick a direction.")
            decision = {"from": node, "to": "party-99-wrap", "label": "chosen", "reason": "the user's pick",
                        "decidedAt": now()}
            return calls(
                complete_node(node, to="party-99-wrap", variables={"direction": direction}, decision=decision),
                *wrap,
            )
        if node == "party-99-wrap":
            return calls(*wrap)
        finish = complete_node("end-99", to=None, variables={"workflowStatus": "complete"})
        if node == "step-03-plan":
            return calls(
                write("@project/artifacts/plan-feature/plan.md",
                      f"# Plan: {variables.get('featureName')}\n\n## Direction\n{variables.get('direction')}\n"),
                complete_node(node, to="end-99", artifacts=["artifacts/plan-feature/plan.md"]),
                finish,
            )
        if node == "end-99":
            return calls(finish)
        return Reply(content=f"(scripted model: no plan for node {node!r})")

    return respond


# ---- driving a run ----------------------------------------------------------------------------


async def drive(
    engine: Engine,
    record: RunRecord,
    package: Package,
    answers: Sequence[UserInput] = (),
    *,
    on_event: Callable[[EngineEvent], Awaitable[None]] | None = None,
) -> list[PumpResult]:
    """Start the run, then answer each WaitingUser stop with the next of `answers`, in order.

    Returns every pump's result; stops when the run completes or fails, or answers run out.
    """
    results = [await engine.pump(record, package, intent="start", on_event=on_event)]
    pending = list(answers)
    while results[-1].phase is RunPhase.WAITING_USER and pending:
        results.append(
            await engine.pump(record, package, intent="continue", user_input=pending.pop(0), on_event=on_event)
        )
    return results


# ---- a ready engine on loopback ---------------------------------------------------------------


@dataclass
class EngineHarness:
    """A started ScriptedLLM, the real openai client pointed at it, and an Engine over a private store."""

    llm: ScriptedLLM
    client: LLMClient
    store: RuntimeStore
    runs: RunManager
    engine: Engine
    project: Path
    events: list[EngineEvent] = field(default_factory=list)

    def load(self, example: str) -> Package:
        """One of examples/ (create-story-micro, hello-branch, multi-workflows)."""
        return load_package(EXAMPLES / example, cache_dir=self.store.packages_dir)

    def create(self, package: Package, workflow: str | None = None, agent: str | None = None) -> RunRecord:
        return self.runs.create(package, workflow, agent, self.project)

    async def record_event(self, event: EngineEvent) -> None:
        self.events.append(event)

    def kinds(self, kind: str) -> list[EngineEvent]:
        return [e for e in self.events if e.kind == kind]


@asynccontextmanager
async def engine_harness(
    project: Path,
    *,
    settings: EngineSettings | None = None,
    max_retries: int = 3,
    timeout: float = 10.0,
    home: Path | None = None,
) -> AsyncIterator[EngineHarness]:
    """`async with engine_harness(project) as h:` — CREWAGENT_HOME (or `home`) holds the store."""
    async with ScriptedLLM() as llm:
        client = LLMClient(LLMSettings(model="scripted", base_url=llm.base_url, max_retries=max_retries,
                                       timeout=timeout))
        store = RuntimeStore(home)
        runs = RunManager(store)
        try:
            yield EngineHarness(llm, client, store, runs, Engine(store, runs, client, settings), project)
        finally:
            await client.aclose()


# A form the model asks the user to fill in (ui_ask_user): two fields, both required.
FORM_WIDGET = {
    "widgetId": "project_details",
    "type": "form",
    "message": "A few details first.",
    "schema": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Project name"},
            "team_size": {"type": "integer", "title": "Team size", "minimum": 1},
        },
        "required": ["name", "team_size"],
    },
}
