"""A second event loop, in its own thread, for everything that is not acknowledging Slack.

Slack wants an ack within 3 s and we promise far less. Session work (model calls, tool runs,
state files, rendering, posting) is CPU-heavy in bursts; on one loop, every ready pump step
queues ahead of an incoming request. With the front door (Bolt + HTTP / Socket Mode) on the
main loop and the work here, a request waits at most for the interpreter to switch threads.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class WorkLoop:
    def __init__(self, name: str = "crewagent-work") -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("the work loop is not running")
        return self._loop

    @property
    def running(self) -> bool:
        return self._loop is not None

    def start(self) -> None:
        if self._loop is not None:
            return
        ready = threading.Event()
        loop = asyncio.new_event_loop()

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(ready.set)
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.wait()
        self._loop = loop

    def call(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run `fn(*args)` on the work loop soon; returns at once."""
        self.loop.call_soon_threadsafe(fn, *args)

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await `coro` running on the work loop, from another loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        """Stop the loop and join its thread (call after the work has been wound down)."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._loop = self._thread = None
