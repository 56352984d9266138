"""ChatMode: a plain assistant without persona, read-only tools plus ui_ask_user, its own short history."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.session_harness import kinds, of_kind, request_text, session_harness, tool_names


async def test_chat_mode_is_plain_and_read_only(project: Path) -> None:
    async with session_harness(project, "create-story-micro") as s:
        out = await s.open("chat")
        assert kinds(out) == ["notice"] and s.session.mode == "chat" and s.session.agent_id is None

        s.h.llm.add_reply(tool_calls=[("fs_write", {"path": "@project/artifacts/hack.md", "content": "x"})])
        s.h.llm.add_reply(tool_calls=[("fs_read", {"path": "@project/project-context.md"})])
        s.h.llm.add_reply("TaskNest uses one story per branch.")
        out = await s.text("What are the branch rules?")
        assert kinds(out) == ["reply"] and out[0].agent is None
        assert out[0].text == "TaskNest uses one story per branch."

        first = s.requests[0]
        assert tool_names(first) == ["fs_read", "fs_list", "fs_search", "ui_ask_user"]
        system = "\n".join(m["content"] for m in first["messages"] if m["role"] == "system")
        assert "You are Bob" not in system and "You are Sam" not in system
        refused = json.loads([m for m in s.requests[1]["messages"] if m["role"] == "tool"][-1]["content"])
        assert refused["ok"] is False
        assert not (project / "artifacts" / "hack.md").exists()
        read = json.loads([m for m in s.requests[2]["messages"] if m["role"] == "tool"][-1]["content"])
        assert read["ok"] is True

        # the next turn sees the short history, but not the tool traffic
        s.h.llm.add_reply("You asked about branch rules.")
        await s.text("What did I ask?")
        roles = [m["role"] for m in s.requests[-1]["messages"] if m["role"] != "system"]
        assert "tool" not in roles
        assert "What are the branch rules?" in request_text(s.requests[-1])
        assert [m["role"] for m in s.session.history] == ["user", "assistant", "user", "assistant"]


async def test_chat_widget_round_trip_and_dismiss(project: Path) -> None:
    async with session_harness(project, "create-story-micro") as s:
        await s.open("chat")
        ask = {"widgetId": "doc_pick", "type": "selection", "message": "Which document?",
               "options": [{"value": "prd", "label": "PRD"}, {"value": "ux", "label": "UX"}]}
        s.h.llm.add_reply(tool_calls=[("ui_ask_user", ask)])
        out = await s.text("Summarise a document for me")
        widget = of_kind(out, "widget")
        assert len(widget) == 1 and widget[0].run_id is None
        assert s.session.pending_widget is not None and s.session.pending_widget.widget_id == "doc_pick"
        assert len(s.requests) == 1  # the question stops the turn

        s.h.llm.add_reply("The UX doc describes the board view.")
        out = await s.submit("doc_pick", ["ux"])
        assert of_kind(out, "reply")[-1].text == "The UX doc describes the board view."
        last_user = [m["content"] for m in s.requests[-1]["messages"] if m["role"] == "user"][-1]
        assert last_user.startswith("USER_INPUT\nWIDGET_SUBMIT\n") and '"value": ["ux"]' in last_user
        again = await s.submit("doc_pick", ["prd"])
        assert again[0].text == "This question was already answered." and len(s.requests) == 2

        out = await s.text("*dismiss")
        assert kinds(out) == ["dismissed"] and s.session.mode == "idle" and s.session.history == []
        out = await s.text("*menu")
        assert kinds(out) == ["show_agents"]


async def test_global_commands_outside_a_run(project: Path) -> None:
    async with session_harness(project, "create-story-micro") as s:
        out = await s.open("*status")
        assert kinds(out) == ["notice"] and "No run" in out[0].text
        out = await s.text("*resume")
        assert kinds(out) == ["notice"] and "no saved run" in out[0].text
        await s.pick("sm")
        out = await s.text("*pause")
        assert kinds(out) == ["notice"]
        out = await s.text("*menu")
        assert kinds(out) == ["show_menu"] and s.session.mode == "agent"
        assert s.requests == []
