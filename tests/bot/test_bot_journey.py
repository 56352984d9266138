"""The user's journey in Slack, end to end: real Bolt app, FakeSlack, scripted competent model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.scripts import parse_widget_submit
from crewagent.core.document.state import read_state
from tests.support.fakes import Reply
from tests.support.fakes.slack_events import message_event, new_ts
from tests.support.scripts import (
    FORM_WIDGET,
    CREATE_STORY_ARTIFACTS,
    HELLO_LINEAR_ANSWER,
    STORY_KEY,
    calls,
    hello_branch_responder,
    is_post_completion,
    patch_state,
    previous_calls,
    previous_results,
    script_create_story,
    script_hello_branch,
    script_hello_linear,
    system_text,
    user_inputs,
    user_texts,
)
from tests.support.bot_harness import (
    Mode,
    artifact_paths,
    bot_harness,
    elements,
    file_option,
    file_select,
    is_status,
    message_text,
    plan_tasks,
)

@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_create_story_journey(project: Path, mode: Mode) -> None:
    async with bot_harness(project, mode=mode) as h:
        script_create_story(h.llm)

        # 1. @crew → greeting in a thread on that message, agents as buttons.
        top = await h.mention("")
        greeting = await h.posted_text("These agents are available")
        assert greeting["thread_ts"] == top
        bob, picker = h.button(top, "Bob")
        assert "🏃 Bob — Scrum Master" in bob["text"]["text"]
        h.button(top, "Sam")

        # 2. Pick Bob → persona greeting + menu buttons.
        mark = h.mark()
        await h.click(bob, picker)
        await h.posted_text("[1] Create the next story", since=mark)
        item, menu = h.button(top, "[1] Create the next story")

        # 3. The menu item starts a run: one status message, the question in the thread.
        mark = h.mark()
        await h.click(item, menu)
        question = await h.posted_text("1-2-user-authentication", since=mark)
        assert question["thread_ts"] == top
        status = await h.wait_status(top, "Waiting for your reply")
        assert "Create Story" in message_text(status) or "create-story" in message_text(status).lower()
        statuses = [m for m in h.thread(top) if is_status(m)]
        assert len(statuses) == 1
        assert question in [p for m, p in h.slack.calls if m == "streamed"]  # the question was streamed
        assert plan_tasks(status)["step-01-select-story"]["status"] == "in_progress"
        assert [p for p in h.slack.calls_to("assistant.threads.setStatus") if p["thread_ts"] == top]

        # 4. A plain reply answers; the run completes.
        mark = h.mark()
        await h.reply(top, STORY_KEY)
        done = await h.posted_text("completed.", since=mark)
        await h.posted_text("ready for design", since=mark)
        await h.settle()
        for path in CREATE_STORY_ARTIFACTS:
            assert path in artifact_paths(done)
            assert (project / path).is_file()
        assert re.search(r"9 model calls · [\d,]+ tokens", message_text(done)), "usage on the completion"
        final = await h.wait_status(top, "Completed")
        assert "6/6" in message_text(final)
        assert {t["status"] for t in plan_tasks(final).values()} == {"complete"}
        plan_edits = [p for p in h.slack.calls_to("chat.update") if any(b["type"] == "plan" for b in p["blocks"])]
        assert len(plan_edits) >= 2  # the plan moved step by step
        assert len([m for m in h.thread(top) if is_status(m)]) == 1
        assert h.slack.calls_to("chat.update"), "the status message is updated in place"

        # 5. Upload an artifact into the thread.
        completion = next(m for m in h.thread(top) if "completed." in message_text(m))
        mark = h.mark()
        summary = file_option(completion, "artifacts/create-story/summary.md")
        await h.click(file_select(completion), completion, selected=summary)
        await h.slack.wait_for("files.completeUploadExternal", since=mark)
        uploaded = [f for f in h.slack.files.values() if f.completed]
        assert uploaded and uploaded[-1].thread_ts == top
        assert uploaded[-1].content == (project / "artifacts/create-story/summary.md").read_bytes()

        # The working reaction is gone once work finished; nothing shows a server path.
        assert not h.slack.reactions
        for params in h.slack.calls_to("chat.postMessage") + h.slack.calls_to("chat.update"):
            assert str(project) not in str(params)
        h.llm.assert_consumed()


async def test_hello_branch_branches_on_a_button_click(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        script_hello_branch(h.llm)
        top = await h.mention("hello-branch")  # exactly one agent has this trigger: the run starts directly
        question = await h.posted_text("greenfield")
        assert question["thread_ts"] == top
        brown, widget = h.button(top, "Brownfield")
        h.button(top, "Greenfield")
        mark = h.mark()
        await h.click(brown, widget)
        done = await h.posted_text("completed.", since=mark)
        await h.settle()
        assert "artifacts/plan-brownfield.md" in artifact_paths(done)
        assert (project / "artifacts/plan-brownfield.md").is_file()
        tasks = plan_tasks(await h.wait_status(top, "Completed"))
        assert tasks["step-03b-brownfield"]["status"] == "complete"
        assert tasks["step-03a-greenfield"]["status"] == "pending" and "not taken" in tasks["step-03a-greenfield"]["title"]
        assert not (project / "artifacts/plan-greenfield.md").exists()
        final = await h.wait_status(top, "Completed")
        assert "Completed · 4 of 5 steps, 1 not taken" in message_text(final)  # as the terminal says it
        answered = next(m for m in h.thread(top) if m["ts"] == widget["ts"])
        assert "User U1 chose *Brownfield*" in message_text(answered) and elements(answered) == []
        h.llm.assert_consumed()


async def test_multi_package_picker_and_a_workflow_handing_over_to_a_second_agent(project: Path) -> None:
    async with bot_harness(project, ["create-story-micro", "multi-workflows"]) as h:
        script_hello_linear(h.llm)
        top = await h.mention("")
        picker = await h.posted_text("These agents are available")
        labels = message_text(picker)
        for name in ("Bob", "Mary", "Winston", "John"):
            assert name in labels  # agents of both packages in one greeting
        mary, message = h.button(top, "Mary")
        mark = h.mark()
        await h.click(mary, message)
        await h.posted_text("[2] Run the hello-branch workflow", since=mark)

        mark = h.mark()
        await h.reply(top, "hello-linear")  # a typed trigger in the thread; no mention needed
        await h.posted_text("What is the topic?", since=mark)
        mark = h.mark()
        await h.reply(top, HELLO_LINEAR_ANSWER)
        done = await h.posted_text("completed.", since=mark)
        await h.settle()
        assert "artifacts/hello-linear/result.md" in artifact_paths(done)
        closing = await h.posted_text("Result: artifacts/hello-linear/result.md", since=mark)
        assert "Mary" in message_text(closing) or "Sam" in message_text(closing) or "Winston" in message_text(closing)
        requests = h.llm.requests
        personas = [r for r in requests if "System Architect" in system_text(r)]
        assert personas, "step-02 ran with the architect's persona"
        h.llm.assert_consumed()


async def test_agent_named_in_the_mention_and_fuzzy_and_ambiguous_input(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        top = await h.mention("Mary")
        await h.posted_text("[1] Run the hello-linear workflow")
        mark = h.mark()
        await h.reply(top, "hello")  # matches both items → candidates as buttons
        clarify = await h.posted_text("Which one did you mean?", since=mark)
        assert "[1] Run the hello-linear workflow" in message_text(clarify)
        assert "[2] Run the hello-branch workflow" in message_text(clarify)

        h.llm.add_reply("I'm Mary. I can run hello-linear or hello-branch for you.")
        mark = h.mark()
        await h.reply(top, "who are you?")  # unknown input → persona answer
        answer = await h.posted_text("I'm Mary", since=mark)
        assert "Business Analyst" in message_text(answer)
        h.llm.assert_consumed()


async def test_direct_message_opens_a_thread_without_a_mention(project: Path) -> None:
    async with bot_harness(project) as h:
        script_create_story(h.llm)
        ts = new_ts()
        await h.event(message_event("sm", channel="D1", ts=ts, channel_type="im"))
        menu = await h.posted_text("[1] Create the next story")
        assert menu["channel"] == "D1" and menu["thread_ts"] == ts
        mark = h.mark()
        await h.reply(ts, "1", channel="D1", channel_type="im")
        await h.posted_text("1-2-user-authentication", since=mark)
        await h.wait_status(ts, "Waiting for your reply", channel="D1")


def _reviewing_responder(base):
    """hello-branch (decided by itself) plus a post-completion exchange about marking the run reviewed.

    After the confirmation widget is answered the model tries the state change either way: only
    the runtime's one-shot confirmation decides whether it lands.
    """

    def respond(body):
        if not is_post_completion(body):
            return base(body)
        results = previous_results(body)
        if previous_calls(body) and results:
            ok = bool(results[-1].get("ok"))
            return Reply(content="Marked as reviewed." if ok else "I did not change the run: it was not confirmed.")
        latest = user_inputs(body)[-1] if user_inputs(body) else ""
        submitted = parse_widget_submit(latest)
        if submitted and submitted.get("widgetId") == "workflow_state_change_confirm":
            return calls(patch_state({"variables": {"set": {"workflowStatus": "complete", "reviewed": "yes"}}}))
        if "reviewed" in latest:
            return calls(("ui_ask_user", {
                "widgetId": "workflow_state_change_confirm",
                "type": "confirmation",
                "message": "I want to modify @state/workflow.md to record that the plan was reviewed. Proceed?",
            }))
        return Reply(content="The workflow is complete.")

    return respond


async def test_post_completion_change_needs_confirm_and_cancel_changes_nothing(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        h.llm.responder = _reviewing_responder(hello_branch_responder(preset_branch="greenfield"))
        top = await h.mention("hello-branch")
        await h.posted_text("completed.")
        await h.settle()
        state_file = next(h.bot.engine.store.home.glob("projects/*/runs/*/state/workflow.md"))
        before = state_file.read_text()

        mark = h.mark()
        await h.reply(top, "please mark the plan as reviewed")
        await h.posted_text("Proceed?", since=mark)
        cancel, widget = h.button(top, "Cancel")
        h.button(top, "Confirm")
        mark = h.mark()
        await h.click(cancel, widget)
        await h.posted_text("it was not confirmed", since=mark)
        await h.settle()
        assert state_file.read_text() == before
        cancelled = next(m for m in h.thread(top) if m["ts"] == widget["ts"])
        assert "Cancelled by User U1" in message_text(cancelled) and elements(cancelled) == []

        mark = h.mark()
        await h.reply(top, "mark it reviewed, please")
        await h.posted_text("Proceed?", since=mark)
        confirm, widget = h.button(top, "Confirm")
        mark = h.mark()
        await h.click(confirm, widget)
        await h.posted_text("Marked as reviewed.", since=mark)
        await h.settle()
        confirmed = next(m for m in h.thread(top) if m["ts"] == widget["ts"])
        assert "Confirmed by User U1" in message_text(confirmed) and elements(confirmed) == []
        assert read_state(state_file.parent)["variables"]["reviewed"] == "yes"
        confirms = h.bot.engine.store.operator_log.audit_entries()  # the operator's audit names who confirmed
        assert [(e.kind, e.person, e.channel) for e in confirms] == [("state.confirmed", "U1", "C1")]
        completions = [m for m in h.thread(top) if "completed." in message_text(m)]
        assert len(completions) == 1, "staying complete does not repeat the completion message"


async def test_form_widget_opens_a_modal_and_validates_the_submission(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        top = await h.mention("Mary")
        await h.posted_text("[1] Run the hello-linear workflow")
        h.llm.add_reply(tool_calls=[("ui_ask_user", FORM_WIDGET)])
        mark = h.mark()
        await h.reply(top, "I need help planning")
        await h.posted_text("A few details first.", since=mark)
        open_form, message = h.button(top, "Open form")

        mark = h.mark()
        await h.click(open_form, message)
        opened = await h.slack.wait_for("views.open", since=mark)
        view = opened["view"]
        assert {b["block_id"] for b in view["blocks"] if b["type"] == "input"} == {"field:name", "field:team_size"}

        status, ack = await h.submit_form(view, {"field:team_size": {"value": {"type": "number_input", "value": "0"}}})
        assert status == 200 and ack is not None and ack["response_action"] == "errors"
        assert set(ack["errors"]) == {"field:name", "field:team_size"}

        h.llm.add_reply("Thanks, TaskNest with 4 people it is.")
        values = {
            "field:name": {"value": {"type": "plain_text_input", "value": "TaskNest"}},
            "field:team_size": {"value": {"type": "number_input", "value": "4"}},
        }
        mark = h.mark()
        status, ack = await h.submit_form(view, values)
        assert status == 200 and not (ack or {}).get("response_action")
        await h.posted_text("TaskNest with 4 people", since=mark)
        answered = next(m for m in h.thread(top) if m["ts"] == message["ts"])
        assert "Answered by User U1" in message_text(answered) and elements(answered) == []
        submitted = parse_widget_submit(user_inputs(h.llm.requests[-1])[-1] if user_inputs(h.llm.requests[-1]) else
                                        user_texts(h.llm.requests[-1])[-1])
        value = {"name": "TaskNest", "team_size": 4}
        assert submitted == {"widgetId": "project_details", "type": "form", "value": value}

        # The same form again is stale now.
        status, ack = await h.submit_form(view, values)
        assert ack is not None and ack["response_action"] == "update"
        h.llm.assert_consumed()


async def test_typed_star_commands_in_a_run_thread(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        script_hello_linear(h.llm)
        top = await h.start_waiting_run("hello-linear")

        mark = h.mark()
        await h.reply(top, "*status")
        fresh = await h.posted(lambda p: is_status(p), since=mark)
        assert "Waiting for your reply" in message_text(fresh)

        mark = h.mark()
        await h.reply(top, "*menu")
        menu = await h.posted_text("[2] Run the hello-branch workflow", since=mark)
        assert "the run stays open" in message_text(menu)

        mark = h.mark()
        await h.reply(top, "*dismiss")
        await h.posted_text("Left the run", since=mark)
        await h.settle()
        item, message = h.button(top, "[1] Run the hello-linear workflow")
        await h.click(item, message)  # the menu shown inside the run is stale once the run was left
        await h.ephemeral("out of date", since=mark)

        mark = h.mark()
        await h.reply(top, "*resume")
        await h.posted_text("What is the topic?", since=mark)
        await h.settle()
        assert len([m for m in h.thread(top) if is_status(m)]) == 2  # the original + *status
