"""Thread ownership: alice opened the thread and owns it; bob may read it and chat with its agent, nothing more.

Every entry point is driven through the real Bolt app (signed deliveries, fake Slack) with both users.
A refusal is an ephemeral to bob that says what he can do, and it never depends on whether what he
clicked is still current (ownership is checked before staleness).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from crewagent.bot.config import Access
from tests.support.scripts import FORM_WIDGET, STORY_KEY, current_node, hello_branch_responder, script_create_story
from tests.support.bot_harness import Harness, bot_harness, elements, is_status, message_text

ALICE, BOB, CAROL, ADMIN = "UALICE", "UBOB", "UCAROL", "UADMIN"
GUEST_ANSWER = "Happy to explain: the run is choosing between greenfield and brownfield."
REFUSAL = f"belongs to <@{ALICE}>"


def persona_or_run(body: dict[str, Any]) -> Any:
    """hello-branch's model; a request outside the run (a persona chat) gets a plain answer."""
    if current_node(body) is None and not any("NODE_BRIEF" in str(m.get("content")) for m in body["messages"]):
        return GUEST_ANSWER
    return hello_branch_responder()(body)


async def quiet_after(h: Harness, mark: int) -> None:
    """Nothing public was posted or edited since `mark`."""
    await h.settle()
    assert [c.method for c in h.slack.calls[mark:] if c.method in ("chat.postMessage", "chat.update")] == []


async def refused(h: Harness, mark: int) -> dict[str, Any]:
    refusal = await h.ephemeral(REFUSAL, since=mark, user=BOB)
    assert "chat with the agent" in refusal["text"]  # says what bob can do instead
    return refusal


async def waiting_branch_run(h: Harness) -> str:
    h.llm.responder = persona_or_run
    top = await h.mention("hello-branch", user=ALICE)
    await h.posted_text("greenfield")
    await h.wait_status(top, "Waiting for your reply")
    await h.settle()
    return top


def run_phase(h: Harness) -> str:
    assert h.bot is not None
    return h.bot.engine.runs.list()[0].phase.value


async def test_typed_commands_and_text_from_someone_else(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        top = await waiting_branch_run(h)
        for command in ("*menu", "*stop", "*pause", "*resume", "*dismiss", "*handover <@UBOB>"):
            mark = h.mark()
            await h.reply(top, command, user=BOB)
            await h.ephemeral("" if command.startswith("*handover") else REFUSAL, since=mark, user=BOB)
            await quiet_after(h, mark)
        assert run_phase(h) == "waiting-user"

        mark = h.mark()
        await h.reply(top, "*status", user=BOB)  # reading is fine
        status = await h.posted(is_status, since=mark)
        assert "Waiting for your reply" in message_text(status)

        mark = h.mark()
        await h.reply(top, "*help", user=BOB)  # so is asking what can be typed
        await h.posted_text("*handover", since=mark)
        assert run_phase(h) == "waiting-user"

        mark = h.mark()
        await h.reply(top, "brownfield please", user=BOB)  # chat, not an answer to alice's question
        await h.posted_text(GUEST_ANSWER, since=mark)
        await h.settle()
        assert run_phase(h) == "waiting-user"

        green, widget = h.button(top, "Greenfield")  # alice's question is still open, and hers
        mark = h.mark()
        await h.click(green, widget, user=ALICE)
        await h.posted_text("completed.", since=mark)
        assert (project / "artifacts/plan-greenfield.md").is_file()
        assert not (project / "artifacts/plan-brownfield.md").exists()


async def test_buttons_forms_and_artifacts_from_someone_else(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        top = await waiting_branch_run(h)
        brown, widget = h.button(top, "Brownfield")
        mark = h.mark()
        await h.click(brown, widget, user=BOB)
        await refused(h, mark)
        await quiet_after(h, mark)
        assert run_phase(h) == "waiting-user"

        green, widget = h.button(top, "Greenfield")
        await h.click(green, widget, user=ALICE)
        await h.posted_text("completed.")
        await h.settle()
        answered = next(m for m in h.thread(top) if m["ts"] == widget["ts"])
        assert f"User {ALICE} chose *Greenfield*" in message_text(answered)
        assert elements(answered) == []  # the answered question has no buttons left

        # The answered widget, clicked by bob: refused for ownership, not "already answered".
        mark = h.mark()
        await h.click(brown, widget, user=BOB)
        refusal = await refused(h, mark)
        assert "already" not in refusal["text"]

        completion = next(m for m in h.thread(top) if "completed." in message_text(m))
        select = next(e for e in elements(completion) if e["type"] == "static_select")
        mark = h.mark()
        await h.click(select, completion, user=BOB, selected="0")
        await refused(h, mark)
        await quiet_after(h, mark)
        assert not h.slack.files

        mark = h.mark()
        await h.click(select, completion, user=ALICE, selected="0")
        await h.slack.wait_for("files.completeUploadExternal", since=mark)


async def test_agent_picker_and_menu_from_someone_else(project: Path) -> None:
    async with bot_harness(project) as h:
        script_create_story(h.llm)
        top = await h.mention("", user=ALICE)
        await h.posted_text("These agents are available")
        bob_agent, picker = h.button(top, "Bob")

        mark = h.mark()
        await h.click(bob_agent, picker, user=BOB)
        await refused(h, mark)
        await quiet_after(h, mark)

        await h.click(bob_agent, picker, user=ALICE)
        await h.posted_text("[1] Create the next story")
        await h.settle()

        mark = h.mark()
        stale_sam, _ = h.button(top, "Sam")
        await h.click(stale_sam, picker, user=BOB)  # stale AND not his: told about ownership
        await refused(h, mark)
        item, menu = h.button(top, "[1] Create the next story")
        await h.click(item, menu, user=BOB)
        await refused(h, mark)
        await quiet_after(h, mark)
        assert h.bot is not None and h.bot.engine.runs.list() == []

        mark = h.mark()
        await h.click(item, menu, user=ALICE)
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        mark = h.mark()
        await h.reply(top, STORY_KEY, user=BOB)  # persona chat; the run does not take it as its answer
        await h.settle()
        assert [r.phase.value for r in h.bot.engine.runs.list()] == ["waiting-user"]
        assert len(h.bot.engine.runs.list()) == 1


async def test_modal_submission_from_someone_else(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        top = await h.mention("Mary", user=ALICE)
        await h.posted_text("[1] Run the hello-linear workflow")
        h.llm.add_reply(tool_calls=[("ui_ask_user", FORM_WIDGET)])
        await h.reply(top, "I need help planning", user=ALICE)
        await h.posted_text("A few details first.")
        open_form, message = h.button(top, "Open form")

        mark = h.mark()
        await h.click(open_form, message, user=BOB)
        await refused(h, mark)
        assert h.slack.calls_to("views.open") == []

        await h.click(open_form, message, user=ALICE)
        view = (await h.slack.wait_for("views.open", since=mark))["view"]
        values = {
            "field:name": {"value": {"type": "plain_text_input", "value": "TaskNest"}},
            "field:team_size": {"value": {"type": "number_input", "value": "4"}},
        }
        status, ack = await h.submit_form(view, values, user=BOB)  # alice's form, submitted by bob
        assert status == 200 and ack is not None and ack["response_action"] == "update"
        assert REFUSAL in str(ack["view"])
        await h.settle()
        h.llm.assert_consumed()


async def test_owner_or_admin_hands_the_thread_over(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"], access=Access(admins=[ADMIN])) as h:
        top = await waiting_branch_run(h)
        mark = h.mark()
        await h.reply(top, "*handover <@UBOB>", user=CAROL)
        await h.ephemeral("can hand this thread over", since=mark, user=CAROL)

        mark = h.mark()
        await h.reply(top, f"*handover <@{BOB}|bob>", user=ALICE)
        await h.posted_text(f"handed this thread over to User {BOB}", since=mark)
        brown, widget = h.button(top, "Brownfield")
        await h.click(brown, widget, user=ALICE)  # alice gave it away
        await h.ephemeral(f"belongs to <@{BOB}>", since=mark, user=ALICE)

        mark = h.mark()
        await h.reply(top, f"*handover <@{CAROL}>", user=ADMIN)  # an admin may hand any thread over
        await h.posted_text(f"handed this thread over to User {CAROL}", since=mark)
        await h.click(brown, widget, user=ADMIN)  # and act in it
        await h.posted_text("completed.", since=mark)
        assert (project / "artifacts/plan-brownfield.md").is_file()
