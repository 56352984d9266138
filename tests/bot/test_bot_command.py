"""`/crew`: a thread opened from a slash command (owned by whoever typed it), `/crew runs`, help and refusals.

Deliveries are real slash-command requests (signed form posts in HTTP mode, `slash_commands`
envelopes over the local Socket Mode server); private answers arrive in the ack or at the
command's `response_url`, both served by the fake Slack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crewagent.bot.config import Access
from crewagent.bot.base.thread import ThreadKey
from tests.support.scripts import hello_branch_responder, script_create_story
from tests.support.bot_harness import Harness, Mode, bot_harness, elements, element_text, message_text

ALICE, BOB, ADMIN = "UALICE", "UBOB", "UADMIN"


def ack_text(ack: dict[str, Any] | None) -> str:
    return str((ack or {}).get("text") or "")


async def response(h: Harness, payload: dict[str, Any]) -> dict[str, Any]:
    name = payload["response_url"].rsplit("/", 1)[-1]
    return await h.slack.wait_for("response_url", lambda p: p.get("_name") == name, timeout=30)


async def opened_thread(h: Harness, channel: str = "C1") -> str:
    """The ts of the channel message `/crew` posted (the thread's root)."""
    root = await h.slack.wait_for("chat.postMessage", lambda p: p.get("channel") == channel and not p.get("thread_ts"))
    found = [ts for (ch, ts), m in h.slack.messages.items() if ch == channel and m.get("text") == root["text"]]
    assert found
    return found[-1]


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_crew_opens_a_thread_with_the_agent_picker_owned_by_whoever_typed_it(project: Path, mode: Mode) -> None:
    async with bot_harness(project, ["hello-branch"], mode=mode) as h:
        h.llm.responder = hello_branch_responder()
        _, ack = await h.command("", user=ALICE)
        assert ack_text(ack) == ""  # nothing to say privately: the thread is the answer
        top = await opened_thread(h)
        picker = await h.posted(lambda p: p.get("thread_ts") == top and "Mary" in message_text(p))
        assert "These agents are available" in message_text(picker)
        await h.settle()

        mary, message = h.button(top, "Mary")
        mark = h.mark()
        await h.click(mary, message, user=BOB)  # bob did not open it
        refusal = await h.ephemeral(f"belongs to <@{ALICE}>", since=mark, user=BOB)
        assert refusal["thread_ts"] == top

        mark = h.mark()
        await h.click(mary, message, user=ALICE)
        await h.posted(lambda p: p.get("thread_ts") == top and "hello-branch" in message_text(p), since=mark)


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_crew_with_an_agent_or_a_trigger_works_like_a_mention(project: Path, mode: Mode) -> None:
    async with bot_harness(project, ["create-story-micro"], mode=mode) as h:
        script_create_story(h.llm)
        await h.command("create-story", user=ALICE)
        top = await opened_thread(h)
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()
        assert h.bot is not None
        run = h.bot.engine.runs.list()[0]
        record = await h.bot.store.get(ThreadKey("T1", "C1", top))
        assert record is not None and record.session.owner == ALICE and record.session.run_id == run.run_id

        mark = h.mark()
        await h.command("sm", user=BOB, channel="C2")
        top2 = await opened_thread(h, channel="C2")
        menu = await h.posted(lambda p: p.get("thread_ts") == top2, since=mark)
        assert "create-story" in message_text(menu) or any("create" in element_text(e).lower() for e in elements(menu))


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_crew_runs_answers_privately_with_the_same_list_as_the_home_tab(project: Path, mode: Mode) -> None:
    async with bot_harness(project, ["hello-branch"], mode=mode, access=Access(admins=[ADMIN])) as h:
        h.llm.responder = hello_branch_responder()
        top = await h.mention("hello-branch", user=ALICE)
        await h.wait_status(top, "Waiting for your reply")
        await h.settle()

        payload, ack = await h.command("runs", user=ALICE, channel="C9")
        answer = await response(h, payload)
        text = message_text(answer)
        assert answer["response_type"] == "ephemeral"
        assert "*Waiting for you* (1)" in text and "<#C1>" in text and "greenfield" in text.lower()
        assert any(b.get("accessory", {}).get("url", "").endswith(top.replace(".", "")) for b in answer["blocks"])

        payload, _ = await h.command("runs", user=BOB)
        assert "You have no runs yet." in message_text(await response(h, payload))
        payload, _ = await h.command("runs all", user=BOB)  # not an admin: still only his own
        assert "You have no runs yet." in message_text(await response(h, payload))
        payload, _ = await h.command("runs all", user=ADMIN)
        everyone = message_text(await response(h, payload))
        assert "All runs" in everyone and f"<@{ALICE}>" in everyone and "*Waiting for someone* (1)" in everyone
        assert h.slack.calls_to("chat.postMessage")[-1].get("thread_ts") == top  # nothing public for /crew runs


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_help_unknown_names_and_refusals_are_private(project: Path, mode: Mode) -> None:
    access = Access(allowed_channels=["C1"], allowed_users=[ALICE, BOB])
    async with bot_harness(project, ["hello-branch"], access=access, mode=mode) as h:
        _, ack = await h.command("help", user=ALICE)
        assert "`/crew runs`" in ack_text(ack) and ack["response_type"] == "ephemeral"

        _, ack = await h.command("gandalf", user=ALICE)
        text = ack_text(ack)
        assert "I don't know an agent or command called `gandalf`" in text
        assert "`/crew analyst`" in text and "`/crew architect`" in text

        _, ack = await h.command("", user=ALICE, channel="C2")
        assert "not enabled in this channel" in ack_text(ack)

        _, ack = await h.command("", user="UCAROL")
        assert "not on this bot's list of allowed users" in ack_text(ack)
        mark = h.mark()
        await h.home_opened("UCAROL")
        carol = await h.home_view("UCAROL", since=mark)
        assert "not on this bot's list of allowed users" in message_text({"blocks": carol["blocks"]})

        h.slack.fail_next("chat.postMessage", "not_in_channel")
        payload, ack = await h.command("", user=BOB)
        assert ack_text(ack) == ""
        answer = await response(h, payload)
        assert "Invite me" in answer["text"] and answer["response_type"] == "ephemeral"
        await h.settle()
        assert [p for p in h.slack.calls_to("chat.postMessage") if not p.get("thread_ts")] == [
            h.slack.calls_to("chat.postMessage")[0]
        ]  # only the refused attempt
        assert h.bot is not None and await h.bot.store.count() == 0


async def test_a_command_the_manifest_does_not_declare_never_arrives(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        with pytest.raises(AssertionError, match="declares no /deploy"):
            await h.command("", name="/deploy")
        h.slack.scopes = h.slack.scopes - {"commands"}
        with pytest.raises(AssertionError, match="commands scope"):
            await h.command("")
