"""Who may act, and clicks on buttons that no longer apply: refused with an ephemeral, nothing changes."""

from __future__ import annotations

import json
from pathlib import Path

from crewagent.bot.config import Access
from tests.support.scripts import STORY_KEY, hello_branch_responder, script_create_story, script_hello_branch
from tests.support.bot_harness import bot_harness, elements, element_text, file_option, file_select, is_status, message_text


async def _nothing_posted_after(h, mark: int) -> None:
    await h.settle()
    assert [c.method for c in h.slack.calls[mark:] if c.method in ("chat.postMessage", "chat.update")] == []


async def test_stale_clicks_are_explained_and_change_nothing(project: Path) -> None:
    async with bot_harness(project) as h:
        script_create_story(h.llm)
        top = await h.mention("")
        await h.posted_text("These agents are available")
        bob, picker = h.button(top, "Bob")
        sam, _ = h.button(top, "Sam")
        await h.click(bob, picker)
        await h.posted_text("[1] Create the next story")
        await h.settle()

        mark = h.mark()
        await h.click(sam, picker)  # the old agent picker
        await h.ephemeral("out of date", since=mark)
        await _nothing_posted_after(h, mark)

        item, menu = h.button(top, "[1] Create the next story")
        await h.click(item, menu)
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        first_status = next(p for p in h.slack.calls_to("chat.postMessage") if is_status(p))
        pause = next(e for e in elements(first_status) if element_text(e) == "Pause")

        mark = h.mark()
        await h.click(item, menu)  # the menu of before the run
        await h.ephemeral("out of date", since=mark)
        await _nothing_posted_after(h, mark)

        await h.reply(top, STORY_KEY)
        await h.posted_text("completed.")
        await h.settle()
        mark = h.mark()
        await h.click(pause, {"ts": h.status_message(top)["ts"], "thread_ts": top})  # Pause of a finished run
        refusal = await h.ephemeral("out of date", since=mark)
        assert "Completed" in refusal["text"]
        await _nothing_posted_after(h, mark)
        h.llm.assert_consumed()


async def test_answered_widget_is_stale(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        script_hello_branch(h.llm)
        top = await h.mention("hello-branch")
        await h.posted_text("greenfield")
        green, widget = h.button(top, "Greenfield")
        brown, _ = h.button(top, "Brownfield")
        await h.click(green, widget)
        await h.posted_text("completed.")
        await h.settle()
        mark = h.mark()
        await h.click(brown, widget)
        await h.ephemeral("already been answered", since=mark)
        await _nothing_posted_after(h, mark)
        assert (project / "artifacts/plan-greenfield.md").is_file()
        assert not (project / "artifacts/plan-brownfield.md").exists()


async def test_channels_and_users_outside_the_allow_lists_are_refused(project: Path) -> None:
    access = Access(allowed_channels=["C1"], allowed_users=["U1", "U2"])
    async with bot_harness(project, access=access) as h:
        mark = h.mark()
        await h.mention("", channel="C2")
        await h.ephemeral("not enabled in this channel", since=mark)
        await h.mention("", channel="C1", user="U9")
        await h.ephemeral("allowed users", since=mark, user="U9")
        await _nothing_posted_after(h, mark)
        await h.mention("", channel="C1", user="U2")
        await h.posted_text("These agents are available", since=mark)


async def test_artifact_upload_is_rechecked_inside_the_project(project: Path, tmp_path: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        h.llm.responder = hello_branch_responder(preset_branch="greenfield")
        top = await h.mention("hello-branch")
        await h.posted_text("completed.")
        await h.settle()
        completion = next(m for m in h.thread(top) if "completed." in message_text(m))
        select = file_select(completion)
        summary_option = file_option(completion, "artifacts/summary.md")
        outside = tmp_path / "outside-secret.txt"
        outside.write_text("not for Slack")
        summary = project / "artifacts/summary.md"
        summary.unlink()
        summary.symlink_to(outside)

        mark = h.mark()
        await h.click(select, completion, selected=summary_option)
        refusal = await h.ephemeral("can't share `artifacts/summary.md`", since=mark)
        assert str(tmp_path) not in refusal["text"] and str(project) not in refusal["text"]

        # A forged menu context naming a file outside the run's artifacts.
        context = json.loads(select["_block_id"])
        forged = dict(select, _block_id=json.dumps({**context, "f": "../outside-secret.txt"}))
        await h.click(forged, completion, selected="99")
        await h.ephemeral("is not an artifact of this run", since=mark)
        await h.click(select, completion, selected="99")  # an index the run does not have
        await h.ephemeral("out of date", since=mark)
        await h.settle()
        assert not [f for f in h.slack.files.values() if f.completed]
