"""Waiting for an asyncio.Event with a time limit, in a way that a cancellation can never be lost.

Not `asyncio.wait_for(event.wait(), timeout)`: on Python 3.11 it swallows a cancellation that
arrives in the same loop iteration as the event is set (CPython gh-86296), so a sender loop told to
stop at shutdown carries on and waits forever, and `close()` never returns. `asyncio.timeout`
delivers the cancellation to the waiting task itself.
"""

from __future__ import annotations

import asyncio
import math


async def wait_set(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until `event` is set or `timeout` seconds pass (None or infinity: no limit); True if set."""
    if timeout is not None and math.isinf(timeout):
        timeout = None
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
