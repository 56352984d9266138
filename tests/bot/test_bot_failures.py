"""A model that is down or hangs: the thread gets one message saying what happened, with Retry, in run and
agent mode; operator details (host, port, setting names) only reach the log."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path
from typing import Any

import pytest

from tests.support.scripts import HELLO_LINEAR_ANSWER, hello_linear_responder
from tests.support.bot_harness import Harness, bot_harness, element_text, elements, message_text

OPERATOR_DETAILS = ("127.0.0.1", "OPENAI_BASE_URL", "CREWAGENT_", "Traceback")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def shown(h: Harness) -> str:
    """Everything the bot posted or edited, as users would read it."""
    return "\n".join(message_text(p) for p in h.slack.calls_to("chat.postMessage") + h.slack.calls_to("chat.update"))


def failure_messages(h: Harness, top: str) -> list[dict[str, Any]]:
    return [m for m in h.thread(top) if ":warning:" in message_text(m) or "failed:" in message_text(m)]


async def test_a_model_that_is_down_is_explained_once_with_retry(
    project: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = closed_port()
    down = {"base_url": f"http://127.0.0.1:{port}/v1", "max_retries": 1}
    async with bot_harness(project, ["multi-workflows"], llm_settings=down) as h:
        caplog.set_level(logging.WARNING, logger="crewagent.core.model.client")
        top = await h.mention("hello-linear")
        await h.wait_status(top, "Failed", timeout=30)
        await h.settle()
        [failure] = failure_messages(h, top)
        text = message_text(failure)
        assert "could not be reached (2 attempts)" in text
        assert text.count("Retry") == 2 and "try again" not in text.lower()  # the sentence and the button
        assert [element_text(e) for e in elements(failure)] == ["Retry"]
        assert elements(h.status_message(top)) == []  # the status does not repeat it
        for detail in (*OPERATOR_DETAILS, str(port)):
            assert detail not in shown(h)
        assert any(f"127.0.0.1:{port}" in r.getMessage() for r in caplog.records)

        # Agent mode: the same one message, with a Retry button too.
        other = await h.mention("Mary")
        await h.posted_text("[1] Run the hello-linear workflow")
        mark = h.mark()
        await h.reply(other, "what can you do?")
        error = await h.posted_text("could not be reached", since=mark, timeout=30)
        await h.settle()
        assert [element_text(e) for e in elements(error)] == ["Retry"]
        assert len(failure_messages(h, other)) == 1
        for detail in (*OPERATOR_DETAILS, str(port)):
            assert detail not in shown(h)


async def test_agent_retry_asks_again_and_the_used_button_says_so(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        top = await h.mention("Mary", user="UALICE")
        await h.posted_text("[1] Run the hello-linear workflow")
        h.llm.add_error(500, "upstream exploded")
        mark = h.mark()
        await h.reply(top, "what can you do?", user="UALICE")
        await h.posted_text("kept failing (HTTP 500", since=mark)
        await h.settle()
        retry, message = h.button(top, "Retry")

        mark = h.mark()
        await h.click(retry, message, user="UBOB")
        await h.ephemeral("belongs to <@UALICE>", since=mark, user="UBOB")

        h.llm.add_reply("I can run the hello-linear workflow with you.")
        mark = h.mark()
        await h.click(retry, message, user="UALICE")
        await h.posted_text("I can run the hello-linear workflow", since=mark)
        await h.settle()
        asked_again = h.llm.requests[-1]["messages"][-1]["content"]
        assert "what can you do?" in str(asked_again)
        used = next(m for m in h.thread(top) if m["ts"] == message["ts"])
        assert "Retried by User UALICE" in message_text(used) and elements(used) == []

        mark = h.mark()
        await h.click(retry, message, user="UALICE")  # a used Retry does nothing more
        await h.ephemeral("out of date", since=mark, user="UALICE")
        h.llm.assert_consumed()


async def test_a_hung_model_shows_its_retries_and_gives_up_within_the_bound(project: Path) -> None:
    never = asyncio.Event()

    async def hang(body: dict[str, Any]) -> str:
        await never.wait()
        return "too late"

    async with bot_harness(project, ["multi-workflows"], llm_settings={"timeout": 1, "max_retries": 1}) as h:
        h.llm.add_responder(hang)
        h.llm.add_responder(hang)
        top = await h.mention("hello-linear")
        # The thread's status line says so while the second attempt waits.
        retrying = await h.slack.wait_for(
            "assistant.threads.setStatus",
            lambda p: "trying again (attempt 2 of 2)" in str(p.get("loading_messages")),
            timeout=30,
        )
        assert "did not answer" in str(retrying["loading_messages"])
        await h.wait_status(top, "Failed", timeout=30)
        await h.settle()
        [failure] = failure_messages(h, top)
        assert "did not answer in time (2 attempts of 1 s each)" in message_text(failure)
        for detail in OPERATOR_DETAILS:
            assert detail not in shown(h)

        h.llm.responder = hello_linear_responder()
        retry, message = h.button(top, "Retry")
        mark = h.mark()
        await h.click(retry, message)
        await h.posted_text("What is the topic?", since=mark)
        await h.reply(top, HELLO_LINEAR_ANSWER)
        await h.posted_text("completed.", since=mark)
        never.set()  # the abandoned calls end before the fake stops
