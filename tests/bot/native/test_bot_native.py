"""Slack's agent surfaces end to end: streamed replies, the status line, the live plan, the agent view,
feedback, and the fallbacks where Slack refuses a newer method. Real Bolt app, FakeSlack (which grants
only manifest.yml's scopes), scripted model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from crewagent.core.base.events import RunPhase
from tests.support.fakes.slack_events import event_envelope, message_event, new_ts
from tests.support.scripts import STORY_KEY, script_create_story, script_hello_linear
from tests.support.bot_harness import bot_harness, is_status, message_text, plan_tasks

CREATE_STORY_NODES = [
    "step-01-select-story",
    "step-02-discover-inputs",
    "step-03-extract-context",
    "step-04-generate-story",
    "step-05-update-sprint-status",
    "end-99",
]


def streamed(h: Any, thread_ts: str) -> list[dict[str, Any]]:
    return [p for m, p in h.slack.calls if m == "streamed" and p.get("thread_ts") == thread_ts]


def feedback_buttons(message: dict[str, Any]) -> tuple[dict[str, Any], str]:
    block = next(b for b in message["blocks"] if b["type"] == "context_actions")
    return block["elements"][0], block.get("block_id", "context_actions")


async def test_a_run_streams_its_replies_shows_its_status_line_and_draws_its_plan(project: Path) -> None:
    async with bot_harness(project) as h:
        h.llm.piece_chars = 6
        script_create_story(h.llm)
        top = await h.mention("create-story")
        question = await h.posted_text("1-2-user-authentication")
        status = await h.wait_status(top, "Waiting for your reply")

        # The question was streamed into the thread, piece by piece, for the person who asked.
        start = next(p for p in h.slack.calls_to("chat.startStream") if p["thread_ts"] == top)
        assert (start["recipient_user_id"], start["recipient_team_id"], start["channel"]) == ("U1", "T1", "C1")
        assert len(h.slack.calls_to("chat.appendStream")) >= 3
        assert question["blocks"][0]["type"] == "context" and "Bob" in message_text(question)  # who is speaking
        assert not [p for p in h.slack.calls_to("chat.postMessage") if "1-2-user-authentication" in message_text(p)]

        # The plan: step 1 in progress (waiting on the user), the rest pending, the agent on each card.
        tasks = plan_tasks(status)
        assert list(tasks) == CREATE_STORY_NODES
        assert tasks["step-01-select-story"]["status"] == "in_progress"
        assert all(tasks[n]["status"] == "pending" for n in CREATE_STORY_NODES[1:])
        assert "Bob" in tasks["step-01-select-story"]["title"] and "Sam" in tasks["end-99"]["title"]
        assert "Pause" not in message_text(status)  # waiting: nothing to pause

        mark = h.mark()
        await h.reply(top, STORY_KEY)
        await h.posted_text("completed.", since=mark)
        await h.posted_text("ready for design", since=mark)
        await h.settle()
        final = await h.wait_status(top, "Completed · 6/6 steps")
        tasks = plan_tasks(final)
        assert all(t["status"] == "complete" for t in tasks.values())
        details = json.dumps(tasks["step-04-generate-story"]["details"])
        assert "Writing artifacts/" in details  # the files each step wrote, on its card
        assert len([m for m in h.thread(top) if is_status(m)]) == 1  # one plan message, edited in place

        # The status line named the work and was cleared at the end; no reaction was needed.
        lines = [p for p in h.slack.calls_to("assistant.threads.setStatus") if p["thread_ts"] == top]
        shown = [m for p in lines for m in p.get("loading_messages") or []]
        # Wordings are coalesced to the newest under the rate limit, so which steps were named depends on timing.
        assert "Waiting for the model" in shown and any(m.startswith("Working on ") for m in shown)
        assert any(m.startswith(("Reading ", "Writing ", "Editing ", "Looking through ")) for m in shown)
        assert ("C1", top) not in h.slack.statuses  # cleared by the replies, or explicitly at the end
        assert not h.slack.calls_to("reactions.add")
        assert all(len(p.get("loading_messages") or []) <= 10 for p in lines)


async def test_feedback_buttons_are_recorded_in_the_audit_log_and_acknowledged_privately(project: Path) -> None:
    async with bot_harness(project) as h:
        script_create_story(h.llm)
        top = await h.mention("create-story")
        await h.posted_text("1-2-user-authentication")
        mark = h.mark()
        await h.reply(top, STORY_KEY)
        await h.posted_text("completed.", since=mark)
        await h.settle()
        done = next(m for m in h.thread(top) if "completed." in message_text(m))
        element, block_id = feedback_buttons(done)
        clicked = {
            "action_id": element["action_id"],
            "value": element["negative_button"]["value"],
            "type": "feedback_buttons",
            "_block_id": block_id,
        }
        mark = h.mark()
        await h.click(clicked, done, user="U7")
        note = await h.ephemeral(":-1:", since=mark, user="U7")
        assert note["thread_ts"] == top
        run = h.bot.engine.runs.list()[0]
        log = h.bot.engine.store.execution_log(run).read_text().splitlines()
        entries = [json.loads(line) for line in log if '"run.feedback"' in line]
        assert [(e["rating"], e["user"]) for e in entries] == [("bad", "U7")]


async def test_opening_the_dm_suggests_agents_and_workflows_and_dm_threads_get_titles(project: Path) -> None:
    async with bot_harness(project) as h:
        script_create_story(h.llm)
        opened = {"type": "app_home_opened", "user": "U1", "channel": "D1", "tab": "messages", "event_ts": new_ts()}
        await h.event(event_envelope(opened))
        prompts = await h.slack.wait_for("assistant.threads.setSuggestedPrompts")
        assert prompts["channel_id"] == "D1" and "thread_ts" not in prompts  # agent view: no thread
        titles = [p["title"] for p in prompts["prompts"]]
        assert titles[0].startswith("🏃 Talk to Bob") and any("Create the next story" in t for t in titles)
        assert {p["message"] for p in prompts["prompts"]} >= {"Bob", "create-story"}
        await h.event(event_envelope({**opened, "event_ts": new_ts()}))  # opened again soon after: not re-set

        ts = new_ts()
        h.slack.add_message("D1", "create-story", ts=ts)
        await h.event(message_event("create-story", channel="D1", ts=ts, channel_type="im"))
        title = await h.slack.wait_for("assistant.threads.setTitle", lambda p: p["thread_ts"] == ts)
        assert title["channel_id"] == "D1" and "Create Story" in title["title"] and "Bob" in title["title"]
        await h.posted_text("1-2-user-authentication")
        await h.settle()
        assert len(h.slack.calls_to("assistant.threads.setSuggestedPrompts")) == 1
        stream = next(p for p in h.slack.calls_to("chat.startStream") if p["channel"] == "D1")
        assert stream["thread_ts"] == ts


async def test_a_thread_where_slack_refuses_the_newer_methods_falls_back_once_without_an_error(
    project: Path,
) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        script_hello_linear(h.llm)
        h.slack.fail_next("chat.startStream", "not_allowed", times=50)
        h.slack.fail_next("assistant.threads.setStatus", "not_supported", times=50)
        top = await h.mention("hello-linear")
        await h.settle()
        question = [m for m in h.thread(top) if "What is the topic?" in message_text(m)]
        assert len(question) == 1 and not h.slack.streams  # posted (and edited) the old way
        assert h.slack.calls_to("reactions.add") and not h.slack.reactions  # the reaction came and went
        attempts = (len(h.slack.calls_to("chat.startStream")), len(h.slack.calls_to("assistant.threads.setStatus")))
        assert attempts == (1, 1)  # each refused once, then not asked again in this thread
        assert not h.slack.calls_to("chat.postEphemeral")
        assert not [p for p in h.slack.calls_to("chat.postMessage") if "went wrong" in message_text(p)]
        await h.reply(top, "Slack bots")
        await h.posted_text("completed.")
        await h.settle()
        assert (len(h.slack.calls_to("chat.startStream")), len(h.slack.calls_to("assistant.threads.setStatus"))) == (
            1,
            1,
        )


async def test_a_stream_slack_expired_is_finished_with_an_edit(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        h.llm.piece_chars = 4
        script_hello_linear(h.llm)
        original = h.slack._stop_stream

        def expire_first(api: Any) -> dict[str, Any]:
            h.slack.expire_stream(api.params["channel"], api.params["ts"])
            h.slack._handlers["chat.stopStream"] = original
            return original(api)

        h.slack._handlers["chat.stopStream"] = expire_first
        top = await h.mention("hello-linear")
        await h.settle()
        edited = [m for m in h.thread(top) if "What is the topic?" in message_text(m)]
        assert len(edited) == 1 and edited[0].get("edited")  # the streamed message, completed in place


async def test_pressing_slacks_stop_on_a_streaming_reply_stops_the_run(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        h.llm.piece_chars = 2
        h.llm.piece_interval = 0.05
        script_hello_linear(h.llm)
        top = await h.mention("hello-linear")
        started = await h.slack.wait_for("chat.startStream", lambda p: p["thread_ts"] == top)
        assert started
        live = next(k for k, state in h.slack.streams.items() if state == "streaming")
        h.slack.stop_stream_by_user(*live)
        await h.slack.wait_for("chat.appendStream", since=h.mark())
        await h.wait_status(top, "Paused")
        await h.settle()
        run = h.bot.engine.runs.list()[0]
        assert run.phase is RunPhase.WAITING_USER and run.paused
        assert not [p for m, p in h.slack.calls if m == "streamed" and p.get("thread_ts") == top]


async def test_the_bots_own_edits_are_dropped_before_bolt_authorizes_them(project: Path) -> None:
    async with bot_harness(project) as h:
        own = {
            "type": "message",
            "subtype": "message_changed",
            "channel": "C1",
            "hidden": True,
            "message": {"type": "message", "bot_id": "BBOT", "app_id": "A1", "text": "edited", "ts": new_ts()},
            "event_ts": new_ts(),
        }
        auth_before = len(h.slack.calls_to("auth.test"))
        assert await h.event(event_envelope(own)) == 200
        assert h.bot.bolt_app.own_edits_dropped == 1
        assert len(h.slack.calls_to("auth.test")) == auth_before


async def test_a_group_dm_works_like_a_channel_a_mention_opens_a_thread(project: Path) -> None:
    async with bot_harness(project) as h:
        chatter = new_ts()
        await h.event(message_event("anyone up for lunch?", channel="G5", ts=chatter, channel_type="mpim"))
        top = await h.mention("", channel="G5")
        greeting = await h.posted_text("These agents are available")
        assert greeting["channel"] == "G5" and greeting["thread_ts"] == top
        reply = new_ts()
        h.slack.add_message("G5", "Bob", ts=reply, thread_ts=top)
        await h.event(message_event("Bob", channel="G5", ts=reply, thread_ts=top, channel_type="mpim"))
        await h.posted_text("[1] Create the next story")
        await h.settle()
        replied_to = {p.get("thread_ts") for p in h.slack.calls_to("chat.postMessage") if p["channel"] == "G5"}
        assert replied_to == {top}  # the group's own chatter is left alone


async def test_a_reply_cut_off_by_the_model_connection_is_closed_with_a_note_and_streamed_again(
    project: Path,
) -> None:
    async with bot_harness(project, ["multi-workflows"], llm_retries=1) as h:
        h.llm.piece_chars = 4
        h.llm.add_reply("Let me think first", drop_after=3)  # two pieces reach Slack, then the connection drops
        script_hello_linear(h.llm)
        top = await h.mention("hello-linear")
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        finished = streamed(h, top)
        assert len(finished) == 2
        assert finished[0]["text"] == "Let me t\n\n_(connection lost, retrying)_"
        assert finished[1]["text"].startswith("1. What is the topic?") and "Let me" not in finished[1]["text"]
        shown = [message_text(m) for m in h.thread(top)]
        assert len([t for t in shown if "What is the topic?" in t]) == 1  # the new answer, once
        assert len([t for t in shown if "Let me t" in t]) == 1 and len(h.llm.requests) == 2
