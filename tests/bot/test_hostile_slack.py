"""What the bot posts to Slack: no mass mentions from model text, no other thread's files, no server paths."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crewagent.bot.base.actions import ButtonValue
from tests.support.fakes import Reply
from tests.support.scripts import Body, hello_branch_responder, hello_linear_responder
from tests.support.bot_harness import bot_harness, file_option, file_select, message_text

MENTIONS = ["<!channel>", "<!here>", "<!everyone>", "<@U0BOSS>", "<!subteam^S123|@oncall>", "<!here|here>"]


def _sent_texts(params: dict[str, Any]) -> list[str]:
    """The top-level text and every mrkdwn text of one chat.postMessage / chat.update."""
    found = [str(params.get("text") or "")]

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            if value.get("type") == "mrkdwn":
                found.append(str(value.get("text")))
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    blocks = params.get("blocks")
    walk(json.loads(blocks) if isinstance(blocks, str) else blocks)
    return found


@pytest.mark.parametrize("piece_chars", [12, 1, 5])
async def test_model_text_cannot_mention_anyone(project: Path, piece_chars: int) -> None:
    normal = hello_linear_responder()
    shout = " ".join(MENTIONS)

    def respond(body: Body) -> Reply:
        reply = normal(body)
        if reply.content and not reply.tool_calls:
            return Reply(content=f"{shout}\n{reply.content}\n**{shout}** `{shout}`")
        return reply

    async with bot_harness(project, ["multi-workflows"]) as h:
        h.llm.responder = respond
        h.llm.piece_chars = piece_chars  # streamed pieces split the mentions at every place
        top = await h.mention("hello-linear")
        question = await h.posted_text("What is the topic?")
        assert question["thread_ts"] == top
        await h.settle()
        posted = [p for call in ("chat.postMessage", "chat.update") for p in h.slack.calls_to(call)]
        sent = [t for p in posted for t in _sent_texts(p)]
        streamed = [str(chunk.get("text")) for call in ("chat.startStream", "chat.appendStream", "chat.stopStream")
                    for p in h.slack.calls_to(call) for chunk in p.get("chunks") or []]
        streamed += [str(p.get("markdown_text")) for call in ("chat.appendStream", "chat.stopStream")
                     for p in h.slack.calls_to(call) if p.get("markdown_text")]
        sent += [t.replace("<\u200b", "&lt;") for t in streamed]
        shown = [t for t in sent if "channel" in t]
        assert shown, "the model's text was posted"
        for text in sent:
            assert "<!" not in text and "<@" not in text, text
        assert any("&lt;!channel>" in t for t in sent)


async def test_an_artifact_button_cannot_fetch_another_threads_run(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        h.llm.responder = hello_branch_responder(preset_branch="greenfield")
        theirs = await h.mention("hello-branch", channel="C2", user="U2")
        await h.posted(lambda p: p.get("channel") == "C2" and "completed." in message_text(p))
        await h.settle()
        completion = next(m for m in h.thread(theirs, "C2") if "completed." in message_text(m))
        select = file_select(completion)
        their_value = ButtonValue.decode(select["_block_id"])
        assert their_value is not None and their_value.r

        mine = await h.mention("", channel="C1", user="U1")
        greeting = await h.posted(lambda p: p.get("channel") == "C1" and p.get("thread_ts") == mine)
        forged = their_value.model_copy(update={"s": f"T1:C1:{mine}"})
        mark = h.mark()
        await h.click(dict(select, _block_id=forged.encode()), {**greeting, "ts": greeting.get("ts") or mine,
                                                              "thread_ts": mine}, user="U1", channel="C1", selected="0")
        await h.ephemeral("belongs to a run of another conversation", since=mark, user="U1")
        await h.settle()
        assert not [f for f in h.slack.files.values() if f.completed]

        # The same menu in its own thread still works.
        await h.click(select, completion, user="U2", channel="C2", selected="0")
        await h.slack.wait_for("files.completeUploadExternal", since=mark)
        [done] = [f for f in h.slack.files.values() if f.completed]
        assert done.channel == "C2" and done.thread_ts == theirs


async def test_nothing_sent_to_slack_names_a_server_path(project: Path, tmp_path: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        h.llm.responder = hello_branch_responder(preset_branch="greenfield")
        top = await h.mention("hello-branch")
        await h.posted_text("completed.")
        await h.settle()
        completion = next(m for m in h.thread(top) if "completed." in message_text(m))
        (project / "artifacts" / "summary.md").unlink()
        summary = file_option(completion, "artifacts/summary.md")
        await h.click(file_select(completion), completion, selected=summary)  # a refusal that names the file
        await h.ephemeral("can't be read any more", user="U1")
        await h.mention("nonsense that matches nothing")
        await h.settle()
        every_call = json.dumps([[call.method, call.params] for call in h.slack.calls], default=str)
        for secret in (str(project), str(tmp_path), str(h.config.home or tmp_path / "crewagent-home")):
            assert secret not in every_call
