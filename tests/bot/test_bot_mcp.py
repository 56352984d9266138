"""MCP tools in Slack: the real Bolt app over FakeSlack, the scripted model, the tracker over stdio."""

from __future__ import annotations

from pathlib import Path

import pytest

from crewagent.bot.config import BotConfig
from tests.support.mcp.tracker import CREATED, LOOKED_UP, NOT_CREATED, TrackerModel, mcp_package, tracker_config
from tests.support.bot_harness import bot_harness, element_text, elements, message_text

OWNER, GUEST = "U1", "U2"


@pytest.fixture
def tickets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRACKER_TOKEN", "xoxp-never-shown-anywhere")
    path = tmp_path / "tickets.txt"
    path.write_text("", encoding="utf-8")
    return path


def _with_tracker(tickets: Path):
    def configure(config: BotConfig) -> None:
        config.mcp_servers = {"tracker": tracker_config(tickets)}
        config.tool_policy = config.tool_policy.model_copy(update={"servers": ("tracker",)})

    return configure


async def test_owner_approves_in_the_thread_after_a_restart_and_denies_later(project: Path, tmp_path: Path, tickets: Path) -> None:
    model = TrackerModel()
    package = str(mcp_package(tmp_path))
    async with bot_harness(project, [package], configure=_with_tracker(tickets)) as h:
        h.llm.responder = model
        top = await h.start_waiting_run("hello-linear")

        mark = h.mark()
        await h.reply(top, "please look up T-1")
        await h.posted_text(LOOKED_UP, since=mark)  # read-only: answered without a question
        await h.settle()
        assert not any("Approve" in message_text(m) for m in h.thread(top))

        mark = h.mark()
        await h.reply(top, "now open a ticket")
        question = await h.posted_text("Approve a tool call?", since=mark)
        await h.settle()
        assert "create_ticket" in message_text(question) and "Fix the login page" in message_text(question)
        assert tickets.read_text() == ""

        # someone else presses Approve: refused privately, nothing happens
        approve, message = h.button(top, "Approve")
        mark = h.mark()
        await h.click(approve, message, user=GUEST)
        await h.ephemeral("", since=mark, user=GUEST)
        await h.settle()
        assert tickets.read_text() == ""

        # *stop while the question waits, then a restart: the owner's click still works
        await h.reply(top, "*stop")
        await h.settle()
        assert tickets.read_text() == ""
        await h.restart()
        approve, message = h.button(top, "Approve")
        mark = h.mark()
        await h.click(approve, message, user=OWNER)
        await h.posted_text(CREATED, since=mark)
        await h.settle()
        assert tickets.read_text() == "Fix the login page\n"
        answered = next(m for m in h.thread(top) if m["ts"] == message["ts"])
        assert "Approved by" in message_text(answered) and elements(answered) == []

        # a second change, denied: not made, and the agent says so
        mark = h.mark()
        await h.reply(top, "open a ticket again")
        await h.posted_text("Approve a tool call?", since=mark)
        await h.settle()
        deny, message = h.button(top, "Deny")
        mark = h.mark()
        await h.click(deny, message, user=OWNER)
        await h.posted_text(NOT_CREATED, since=mark)
        await h.settle()
        assert tickets.read_text() == "Fix the login page\n"
        answered = next(m for m in h.thread(top) if m["ts"] == message["ts"])
        assert "Denied by" in message_text(answered)

        # the architect's step never sees the tracker's tools
        mark = h.mark()
        await h.reply(top, "go on")
        await h.wait_status(top, "Complete")
        await h.settle()
        assert not any(n.startswith("tracker__") for n in model.offered["step-02-generate"])
        assert model.refusals and model.refusals[0]["error"]["code"] == "TOOL_NOT_AVAILABLE"
        posted = " ".join(str(c) for c in h.slack.calls)
        assert "xoxp-never-shown-anywhere" not in posted


async def test_serve_starts_when_a_server_cannot_and_says_why_in_the_log(
    project: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from crewagent.core.tools.mcp.server_config import McpServerConfig

    def configure(config: BotConfig) -> None:
        config.mcp_servers = {"broken": McpServerConfig(command="/nonexistent/mcp-server")}
        config.tool_policy = config.tool_policy.model_copy(update={"servers": ("broken",)})

    caplog.set_level("WARNING", logger="crewagent.core.tools.mcp.hub")
    model = TrackerModel()
    async with bot_harness(project, [str(mcp_package(tmp_path))], configure=configure) as h:
        h.llm.responder = model
        top = await h.start_waiting_run("hello-linear")
        assert top
        assert not any("__" in n for names in model.offered.values() for n in names)
    assert "MCP server broken is not available: its command was not found" in caplog.text


async def test_allow_for_this_run_button_approves_and_remembers_the_prefix(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command-like tool's card: its command in a code block, Approve / Deny / Allow `git diff` for this
    run; the owner's Allow runs it and the next `git diff` call is not asked; the card shows the outcome."""
    from crewagent.core.tools import registry
    from tests.support.probe_tool import PROBE, commands_model, probe_tool

    ran: list[tuple[str, str | None]] = []
    monkeypatch.setitem(registry.TOOLS, PROBE, probe_tool(ran))
    async with bot_harness(project, [str(mcp_package(tmp_path))]) as h:
        h.llm.responder = commands_model
        top = await h.start_waiting_run("hello-linear")
        mark = h.mark()
        await h.reply(top, "diff please")
        card = await h.posted_text("Run a command?", since=mark)
        await h.settle()
        assert "```git diff --stat```" in message_text(card).replace("\n", "")
        allow, message = h.button(top, "for this run")
        assert [element_text(e) for e in elements(message)] == ["Approve", "Deny", "Allow `git diff` for this run"]
        mark = h.mark()
        await h.click(allow, message, user=GUEST)  # only the owner (or an admin) decides
        await h.ephemeral("", since=mark, user=GUEST)
        await h.settle()
        assert ran == []
        mark = h.mark()
        await h.click(allow, message, user=OWNER)
        await h.posted_text("Diffed twice. What next?", since=mark)
        await h.settle()
        assert ran == [("git diff --stat", OWNER), ("git diff HEAD", None)]
        answered = next(m for m in h.thread(top) if m["ts"] == message["ts"])
        assert "Allowed `git diff` for this run by" in message_text(answered) and elements(answered) == []
