"""Agent persona chat, ChatMode and exec scripts: read-only tools, widgets, caller-owned history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crewagent.core.base.errors import CrewError
from tests.support.scripts import engine_harness, system_text

READ_ONLY = ["fs_read", "fs_list", "fs_search", "ui_ask_user"]


async def test_agent_chat_uses_read_only_tools_and_the_persona(project: Path) -> None:
    async with engine_harness(project) as h:
        package = h.load("multi-workflows")
        h.llm.add_reply(tool_calls=[("fs_read", {"path": "@project/artifacts/epics.md"}),
                                    ("fs_write", {"path": "@project/artifacts/x.md", "content": "no"})])
        h.llm.add_reply(content="Epic 1 is about accounts.")
        earlier = [{"role": "user", "content": "USER_INPUT\nhello"}, {"role": "assistant", "content": "Hi!"}]

        reply = await h.engine.converse(package, package.agent("architect"), earlier, "What is epic 1?",
                                        project_root=project)

        assert reply.text == "Epic 1 is about accounts." and reply.widget is None
        assert (reply.llm_calls, reply.tool_calls) == (2, 2)
        first = h.llm.requests[0]
        assert [t["function"]["name"] for t in first["tools"]] == READ_ONLY
        assert "You are Winston (Architect)" in system_text(first)
        assert "- active: agent" in system_text(first)
        assert not any(str(m.get("content", "")).startswith("RUN_DIRECTIVE") for m in first["messages"])
        results = [json.loads(m["content"]) for m in reply.history if m["role"] == "tool"]
        assert results[0]["ok"] is True
        assert results[1]["error"]["code"] == "TOOL_NOT_AVAILABLE"
        assert not (project / "artifacts/x.md").exists()
        assert reply.history[:2] == earlier and len(earlier) == 2  # the caller's list is untouched
        assert reply.history[2] == {"role": "user", "content": "USER_INPUT\nWhat is epic 1?"}


async def test_chat_mode_has_no_persona_and_no_state(project: Path) -> None:
    async with engine_harness(project) as h:
        package = h.load("hello-branch")
        h.llm.add_reply(tool_calls=[("fs_read", {"path": "@state/workflow.md"})])
        h.llm.add_reply(content="There is no run here.")
        reply = await h.engine.converse(package, None, [], "read the state", project_root=project)
        system = system_text(h.llm.requests[0])
        assert "You are Mary" not in system and "- active: chat" in system
        result = json.loads([m for m in reply.history if m["role"] == "tool"][0]["content"])
        assert result["error"]["code"] == "E_SANDBOX_VIOLATION"


async def test_scripts_get_extra_context_and_widgets_stop_the_loop(project: Path) -> None:
    async with engine_harness(project) as h:
        package = h.load("multi-workflows")
        widget = {"widgetId": "pick_file", "type": "selection", "message": "Which file?",
                  "options": [{"value": "a", "label": "A"}, {"value": "b", "label": "B"}]}
        h.llm.add_reply(tool_calls=[("ui_ask_user", widget)])
        reply = await h.engine.converse(package, package.agent("architect"), [], "", project_root=project,
                                        mode="script", extra_context=["EXEC_SCRIPT @pkg/assets/review-checklist.md\nDo it."])
        assert reply.widget is not None and reply.widget["widgetId"] == "pick_file"
        assert reply.text == "Which file?"
        sent = h.llm.requests[0]["messages"]
        assert sent[-1]["content"].startswith("EXEC_SCRIPT")
        assert "- active: script" in system_text(h.llm.requests[0])
        h.llm.assert_consumed()


async def test_conversation_errors_are_crew_errors(project: Path) -> None:
    async with engine_harness(project, max_retries=0) as h:
        package = h.load("hello-branch")
        h.llm.add_error(401)
        with pytest.raises(CrewError) as err:
            await h.engine.converse(package, None, [], "hi", project_root=project)
        assert err.value.code == "LLM_AUTH_FAILED" and "credentials" in err.value.message
