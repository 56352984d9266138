"""Failures and restarts: a failed run says why and offers Retry; a run cut off by a restart resumes."""

from __future__ import annotations

from pathlib import Path

from crewagent.core.base.events import RunPhase
from tests.support.scripts import HELLO_LINEAR_ANSWER, script_hello_linear
from tests.support.bot_harness import bot_harness, element_text, elements, is_status, message_text, plan_tasks


async def test_llm_failure_shows_the_reason_and_retry_works(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        script_hello_linear(h.llm)
        h.llm.add_error(500, "upstream exploded")
        top = await h.mention("hello-linear")
        failed = await h.posted_text("failed")
        await h.settle()
        text = message_text(failed)
        assert "Hello Linear" in text
        for leak in ("Traceback", str(h.bot.engine.store.home), str(project)):
            assert leak not in text
        status = await h.wait_status(top, "Failed")
        failed_step = [t for t in plan_tasks(status).values() if t["status"] == "error"]
        assert len(failed_step) == 1 and "HTTP 500" in str(failed_step[0]["output"])  # the reason, on its step
        assert "Retry" not in [element_text(e) for e in elements(status)]  # Retry is on the one failure message
        retry, message = h.button(top, "Retry")
        assert "failed" in message_text(message) and message["ts"] != status["ts"]
        assert len([m for m in h.thread(top) if "failed" in message_text(m) and not is_status(m)]) == 1

        mark = h.mark()
        await h.click(retry, message)
        await h.posted_text("What is the topic?", since=mark)
        used = next(m for m in h.thread(top) if m["ts"] == message["ts"])
        assert "Retried by User U1" in message_text(used) and elements(used) == []
        await h.wait_status(top, "Waiting for your reply")
        mark = h.mark()
        await h.reply(top, HELLO_LINEAR_ANSWER)
        await h.posted_text("completed.", since=mark)
        assert h.bot.engine.runs.list()[0].phase is RunPhase.COMPLETED


async def test_a_run_cut_off_by_a_restart_is_resumed_on_start(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        script_hello_linear(h.llm)
        top = await h.start_waiting_run("hello-linear")
        h.llm.add_delay(1.0)
        await h.reply(top, HELLO_LINEAR_ANSWER)
        await h.wait_status(top, "Running")
        await h.llm.wait_for_requests(2)

        await h.restart(grace=0.0)  # the process dies while the model call is in flight
        assert h.bot.engine.runs.list()[0].phase in (RunPhase.RUNNING, RunPhase.COMPLETED)
        await h.posted_text("resuming this run")
        done = await h.posted_text("completed.")
        assert done["thread_ts"] == top
        assert (project / "artifacts/hello-linear/result.md").is_file()
        assert len([m for m in h.thread(top) if is_status(m)]) == 1
        assert h.bots[-1].resumed == 1

        mark = h.mark()
        await h.reply(top, "thanks!")  # the thread's session survived the restart
        await h.posted(lambda p: p.get("thread_ts") == top, since=mark)


async def test_without_auto_resume_a_cut_off_run_offers_a_resume_button(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        script_hello_linear(h.llm)
        top = await h.start_waiting_run("hello-linear")
        h.llm.add_delay(1.0)
        await h.reply(top, HELLO_LINEAR_ANSWER)
        await h.llm.wait_for_requests(2)
        h.config.resume_on_start = False
        await h.restart(grace=0.0)
        await h.posted_text("Press *Resume*")
        resume, message = h.button(top, "Resume")
        mark = h.mark()
        await h.click(resume, message)
        await h.posted_text("completed.", since=mark)
