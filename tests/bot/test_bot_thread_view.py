"""What the thread shows: one answer to a single-agent mention, and uploads that say why they failed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.support.paths import EXAMPLES
from tests.support.scripts import hello_branch_responder
from tests.support.bot_harness import bot_harness, elements, file_select, message_text


def solo_package(tmp_path: Path) -> Path:
    """create-story-micro with its first agent only."""
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
    return src


async def test_a_single_agent_mention_gets_one_answer(project: Path, tmp_path: Path) -> None:
    async with bot_harness(project, [str(solo_package(tmp_path))]) as h:
        h.llm.add_reply("Hi! I prepare the next story; type *menu to see what I can do.")
        top = await h.mention("hi")
        await h.posted_text("I prepare the next story")
        await h.settle()
        [answer] = h.thread(top)
        assert elements(answer) == []  # the persona answered; no menu next to it

        empty = await h.mention("")  # a bare mention: the menu, and no model call
        await h.posted_text("Create the next story")
        await h.settle()
        assert len(h.thread(empty)) == 1
        h.llm.assert_consumed()


async def test_upload_failures_say_what_happened(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        h.llm.responder = hello_branch_responder(preset_branch="greenfield")
        top = await h.mention("hello-branch")
        await h.posted_text("completed.")
        await h.settle()
        completion = next(m for m in h.thread(top) if "completed." in message_text(m))
        select = file_select(completion)

        h.slack.fail_next("files.getUploadURLExternal", "not_in_channel")
        mark = h.mark()
        await h.click(select, completion, selected="0")
        permanent = await h.ephemeral("I couldn't post `artifacts/intake.md`", since=mark)
        assert "Invite me" in permanent["text"] and "try again in a minute" not in permanent["text"]

        h.slack.fail_next("files.completeUploadExternal", "internal_error")
        mark = h.mark()
        await h.click(select, completion, selected="0")
        transient = await h.ephemeral("try again in a minute", since=mark)
        assert "Slack reported an error" in transient["text"]

        # The file transfer itself fails (slack_sdk raises SlackRequestError, not SlackApiError).
        broken = {"ok": True, "upload_url": f"{h.slack.url}/upload/v1/missing", "file_id": "FMISSING"}
        h.slack.set_response("files.getUploadURLExternal", broken)
        mark = h.mark()
        await h.click(select, completion, selected="0")
        transfer = await h.ephemeral("try again in a minute", since=mark)
        assert "file transfer to Slack failed" in transfer["text"] and h.slack.url not in transfer["text"]
        await h.settle()
        assert not [f for f in h.slack.files.values() if f.completed]
