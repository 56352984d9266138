"""AgentMode: first contact, agent picking, and dispatch of every command kind against real packages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from crewagent.core.base.events import RunPhase
from tests.support.scripts import EXAMPLES, HELLO_LINEAR_ANSWER, script_hello_linear
from tests.support.session_harness import (
    BRAINSTORM_SCRIPT,
    kinds,
    make_lab_package,
    of_kind,
    request_text,
    session_harness,
    tool_names,
)

READ_ONLY = ["fs_read", "fs_list", "fs_search", "ui_ask_user"]


def no_server_paths(outputs: list, *roots: Path) -> None:
    dumped = json.dumps([o if isinstance(o, dict) else o.model_dump(mode="json") for o in outputs])
    for root in roots:
        assert str(root) not in dumped


# ---- first contact and picking -------------------------------------------------------------


async def test_open_without_text_lists_agents_then_pick_shows_persona_and_menu(project: Path) -> None:
    async with session_harness(project, "create-story-micro") as s:
        out = await s.open()
        assert kinds(out) == ["show_agents"]
        assert [a.id for a in out[0].agents] == ["sm", "summarizer"]
        assert s.session.mode == "idle"
        menu = (await s.pick("sm"))[0]
        assert menu.kind == "show_menu"
        assert "Bob" in menu.text and "Scrum Master" in menu.text and "🏃" in menu.text
        assert "Creates developer-ready story context" in menu.text
        assert [(i.index, i.trigger) for i in menu.items] == [(1, "create-story")]
        assert (s.session.mode, s.session.agent_id, s.session.package_id) == ("agent", "sm", "create-story-micro")
        assert kinds(s.live) == ["show_agents", "show_menu"]  # emitted live as well as returned
        assert s.requests == []  # no LLM call for menus


async def test_open_names_an_agent_by_persona_name_or_number(project: Path) -> None:
    async with session_harness(project, "create-story-micro") as s:
        out = await s.open("Bob")
        assert kinds(out) == ["show_menu"] and s.session.agent_id == "sm"
    async with session_harness(project, "create-story-micro") as s:
        await s.open("2")
        assert s.session.agent_id == "summarizer"


async def test_open_with_a_unique_menu_trigger_picks_the_agent_and_runs_it(project: Path) -> None:
    async with session_harness(project, "multi-workflows") as s:
        script_hello_linear(s.h.llm)
        out = await s.open("hello-linear")
        assert s.session.agent_id == "analyst" and s.session.mode == "run"
        assert kinds(out)[0] == "run_started"
        assert "What is the topic?" in of_kind(out, "reply")[-1].text


async def test_open_with_unrelated_text_greets_with_agents(project: Path) -> None:
    async with session_harness(project, "multi-workflows") as s:
        out = await s.open("good morning")
        assert kinds(out) == ["show_agents"] and s.session.mode == "idle"
        assert s.requests == []


async def test_unknown_agent_is_a_clear_error(project: Path) -> None:
    async with session_harness(project, "create-story-micro") as s:
        out = await s.pick("nobody")
        assert out[0].kind == "error" and out[0].code == "AGENT_NOT_FOUND"
        assert "sm" in out[0].message and s.session.mode == "idle"


async def test_single_agent_package_is_picked_directly(project: Path, tmp_path: Path) -> None:
    src = tmp_path / "solo"
    shutil.copytree(EXAMPLES / "create-story-micro", src)
    agents = json.loads((src / "agents.json").read_text())
    agents["agents"] = agents["agents"][:1]
    (src / "agents.json").write_text(json.dumps(agents))
    graph = json.loads((src / "workflow.graph.json").read_text())
    for node in graph["nodes"]:
        node.pop("agentId", None)
    (src / "workflow.graph.json").write_text(json.dumps(graph))
    end = src / "steps" / "end-99.md"
    end.write_text(end.read_text().replace('agentId: "summarizer"\n', ""))
    async with session_harness(project, src) as s:
        out = await s.open()
        assert kinds(out) == ["show_menu"] and s.session.agent_id == "sm"
    async with session_harness(project, src) as s:
        s.h.llm.add_reply("I prepare stories.")
        out = await s.open("what can you do?")
        assert kinds(out) == ["reply"] and out[0].text == "I prepare stories."  # the answer, not menu + answer
        assert s.session.agent_id == "sm" and s.session.mode == "agent"
        assert "what can you do?" in request_text(s.requests[0])


# ---- dispatch of every command kind --------------------------------------------------------


async def test_workflow_by_id_by_md_path_and_by_exec_workflow_md(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    for text in ("1", "linear-by-path", "exec-linear"):
        async with session_harness(project, lab) as s:
            script_hello_linear(s.h.llm)
            await s.pick("analyst")
            out = await s.text(text)
            started = of_kind(out, "run_started")
            assert len(started) == 1 and started[0].snapshot.workflow_id == "hello-linear", text
            assert s.session.mode == "run" and s.session.run_id == started[0].snapshot.run_id
            record = s.h.runs.get(s.session.run_id)
            assert record.active_agent_id == "analyst" and record.phase is RunPhase.WAITING_USER
            progress = of_kind(out, "run_progress")
            assert any(p.event.kind == "node_started" for p in progress)
            assert all(p.snapshot.run_id == record.run_id for p in progress)


async def test_exec_script_runs_one_shot_with_data_and_read_only_tools(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab) as s:
        await s.pick("analyst")
        s.h.llm.add_reply("1. Offline mode\n2. Shared boards")
        out = await s.text("brainstorm\ntopic: task boards")
        assert kinds(out) == ["reply"] and "Shared boards" in out[0].text
        assert out[0].agent is not None and out[0].agent.name == "Mary"
        body = s.requests[-1]
        text = request_text(body)
        assert "BRAINSTORM-SCRIPT-7" in text and "@pkg/scripts/brainstorm.md" in text
        assert "Extra context (from menuItem.data):" in text and "@pkg/assets/context.json" in text
        assert "JSON object with 3 key(s)" in text
        assert text.index("Extra context") < text.index("BRAINSTORM-SCRIPT-7") < text.rindex("topic: task boards")
        assert tool_names(body) == READ_ONLY
        assert s.session.mode == "agent" and s.session.run_id is None
        assert s.h.runs.list() == []
        no_server_paths([body], lab, project)
        assert BRAINSTORM_SCRIPT.strip().splitlines()[0] in text


async def test_prompt_action_inline_action_and_unknown_prompt(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab) as s:
        await s.pick("analyst")
        s.h.llm.add_reply("Verdict: ready.")
        out = await s.text("RV")  # the [RV] code of the description
        assert kinds(out) == ["reply"] and out[0].text == "Verdict: ready."
        assert "PROMPT-RV-3" in request_text(s.requests[-1])

        s.h.llm.add_reply("1. Be precise")
        out = await s.text("*tips")
        body = request_text(s.requests[-1])
        assert "List three quick tips about writing requirements." in body
        assert "Extra context (from menuItem.data):" in body and "@project/project-context.md" in body
        assert "Project context: TaskNest" in body  # the preview
        assert out[0].text == "1. Be precise"

        before = len(s.requests)
        out = await s.text("ghost")
        assert kinds(out) == ["error"] and out[0].code == "UNKNOWN_PROMPT_ID"
        assert "ghost" in out[0].message and len(s.requests) == before


async def test_builtins_menu_dismiss_and_resume(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab) as s:
        await s.pick("analyst")
        out = await s.text("show-menu")
        assert kinds(out) == ["show_menu"]
        out = await s.text("resume-last")
        assert kinds(out) == ["notice"] and "no saved run" in out[0].text

        script_hello_linear(s.h.llm)
        await s.text("hello-linear")
        run_id = s.session.run_id
        await s.text("*dismiss")
        assert s.session.mode == "idle" and s.session.run_id is None
        await s.pick("analyst")
        out = await s.text("resume-last")
        assert of_kind(out, "run_started")[0].snapshot.run_id == run_id
        assert s.session.mode == "run" and s.session.run_id == run_id
        assert "What is the topic?" in of_kind(out, "reply")[-1].text  # resumed: the question again

        await s.pick("analyst")
        out = await s.text("bye")
        assert kinds(out) == ["dismissed"] and s.session.mode == "idle" and s.session.agent_id is None
        assert s.requests and len(s.requests) == 2  # ask + resumed ask; menus and builtins never call the LLM


async def test_data_is_injected_into_the_run_request(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab) as s:
        script_hello_linear(s.h.llm)
        await s.pick("analyst")
        await s.text("linear-with-data")
        first = request_text(s.requests[0])
        assert "Extra context (from menuItem.data):" in first and "@project/project-context.md" in first
        await s.text(HELLO_LINEAR_ANSWER)
        assert "Extra context (from menuItem.data):" in request_text(s.requests[-1])
        assert s.h.runs.get(s.session.run_id).phase is RunPhase.COMPLETED


async def test_data_load_failures_stop_before_any_llm_call(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab) as s:
        await s.pick("analyst")
        out = await s.text("broken-data")
        assert kinds(out) == ["error"] and out[0].code == "DATA_LOAD_FAILED"
        assert "@pkg/assets/broken.json" in out[0].message and "not valid JSON" in out[0].message
        out = await s.text("missing-data")
        assert out[0].code == "DATA_LOAD_FAILED" and "does not exist" in out[0].message
        assert s.requests == [] and s.session.mode == "agent"
        no_server_paths(out, lab, project)


async def test_validate_workflow_pre_check(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab) as s:
        await s.pick("analyst")
        out = await s.text("checked-missing")
        assert kinds(out) == ["error"] and out[0].code == "VALIDATION_FAILED"
        assert "@pkg/assets/nope-checklist.md" in out[0].message
        assert s.h.runs.list() == [] and s.session.mode == "agent"

        step = lab / "workflows" / "hello-linear" / "steps" / "step-02-generate.md"
        saved = step.read_text()
        step.unlink()
        out = await s.text("checked-linear")
        assert out[0].code == "VALIDATION_FAILED"
        assert "workflows/hello-linear/steps/step-02-generate.md" in out[0].message
        assert "step-02-generate" in out[0].message
        no_server_paths(out, lab, project)
        assert s.h.runs.list() == [] and s.requests == []

        step.write_text(saved)
        script_hello_linear(s.h.llm)
        out = await s.text("checked-linear")
        assert of_kind(out, "run_started") and s.session.mode == "run"


async def test_classic_workflow_is_refused(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab) as s:
        await s.pick("analyst")
        [menu] = await s.text("*menu")
        classic = [item for item in menu.items if item.unavailable]
        assert len(classic) == 1 and "not available here yet" in classic[0].unavailable
        assert all(item.unavailable is None for item in menu.items if item is not classic[0])
        out = await s.text("classic")
        assert out[0].code == "NOT_SUPPORTED_CLASSIC_WORKFLOW" and "not available here yet" in out[0].message
        assert "workflow.yaml" not in out[0].message and "BMAD" not in out[0].message
        assert s.requests == [] and s.h.runs.list() == []


async def test_menu_gating_by_surface(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab, surface="web") as s:
        web = (await s.pick("analyst"))[0]
        assert "Only in the IDE" not in [i.label for i in web.items]
    async with session_harness(project, lab, surface="ide") as s:
        ide = (await s.pick("analyst"))[0]
        labels = [i.label for i in ide.items]
        assert "Only in the IDE" in labels and len(labels) == len(web.items) + 1


async def test_clarify_then_number_picks_from_the_visible_menu(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab) as s:
        await s.pick("analyst")
        out = await s.text("hello")
        assert kinds(out) == ["clarify"]
        assert [(c.index, c.trigger) for c in out[0].candidates] == [(1, "hello-linear"), (2, "hello-branch")]
        assert [c.index for c in s.session.clarify] == [1, 2]
        out = await s.text("42")
        assert kinds(out) == ["clarify"] and "1 to" in out[0].text
        s.h.llm.add_reply("Which project?")  # hello-branch's first request; the run stops there
        out = await s.text("2")
        assert of_kind(out, "run_started")[0].snapshot.workflow_id == "hello-branch"
        assert s.session.clarify == []


async def test_agent_chat_keeps_a_short_history(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab) as s:
        await s.pick("analyst")
        s.h.llm.add_reply("Hi, I am Mary.")
        s.h.llm.add_reply("You asked who I am.")
        out = await s.text("who are you, really?")
        assert out[0].kind == "reply" and out[0].agent.name == "Mary"
        first = s.requests[-1]
        system = "\n".join(m["content"] for m in first["messages"] if m["role"] == "system")
        assert "You are Mary" in system and tool_names(first) == READ_ONLY
        await s.text("what did I just ask?")
        second = request_text(s.requests[-1])
        assert "who are you, really?" in second and "Hi, I am Mary." in second
        assert [m["role"] for m in s.session.history] == ["user", "assistant", "user", "assistant"]
        s.session.model_validate_json(s.session.model_dump_json())  # stays plain, persistable data


async def test_llm_failure_in_chat_is_a_clear_error(project: Path, tmp_path: Path) -> None:
    lab = make_lab_package(tmp_path)
    async with session_harness(project, lab) as s:
        await s.pick("analyst")
        for _ in range(4):
            s.h.llm.add_error(401, "bad key")
        out = await s.text("tell me about the project")
        assert kinds(out) == ["error"] and out[0].code == "LLM_AUTH_FAILED"
        assert "credentials" in out[0].message and out[0].retry and s.session.mode == "agent"
