"""A stop that arrives as a sender loop's wake-up event is set must still stop it (shutdown never hangs)."""

from __future__ import annotations

import asyncio

from crewagent.bot.waits import wait_set


async def _started(task: asyncio.Task[object]) -> None:
    """Let `task` reach its wait (two loop iterations: the task's first step, then its inner wait)."""
    for _ in range(3):
        await asyncio.sleep(0)
    assert not task.done()


async def test_a_cancel_in_the_same_iteration_as_the_wake_up_is_not_swallowed() -> None:
    event = asyncio.Event()

    async def sender() -> None:
        while True:  # like the status senders: wait (with a time limit), work, wait again
            await wait_set(event, 60)
            event.clear()

    task = asyncio.create_task(sender())
    await _started(task)
    event.set()
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    try:
        assert task in done and task.cancelled(), "the cancelled sender kept waiting"
    finally:
        task.cancel()  # with the old wait, cancel it again so the test leaves nothing running


async def test_wait_set_reports_set_or_timed_out() -> None:
    event = asyncio.Event()
    assert await wait_set(event, 0.01) is False
    event.set()
    assert await wait_set(event, 0.01) is True
    assert await wait_set(event, float("inf")) is True
