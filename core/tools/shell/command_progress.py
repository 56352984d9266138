"""A running command, as the run's surface shows it: started, time so far and last line, then how it ended."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from ...base.events import CommandProgress
from ..base import ToolContext
from .command_runner import Finished
from .output_capture import OutputCapture, clean
from .sandbox_layout import Layout, scrub

EVERY_SECONDS = 3.0
COMMAND_CHARS = 200
TAIL_LINES = 15
TAIL_CHARS = 2_500


class CommandReporter:
    """`async with` around the run: a start event and one every few seconds; `ended()` afterwards."""

    def __init__(self, ctx: ToolContext, command: str, cwd: str, capture: OutputCapture, layout: Layout) -> None:
        self.ctx, self.capture, self.layout = ctx, capture, layout
        one_line = " ".join(command.split())
        self.command = one_line if len(one_line) <= COMMAND_CHARS else one_line[: COMMAND_CHARS - 1] + "…"
        self.cwd = cwd
        self.call_id = uuid.uuid4().hex[:12]
        self.started = time.monotonic()
        self._ticker: asyncio.Task[None] | None = None

    def _event(self, **fields: object) -> CommandProgress | None:
        if self.ctx.progress is None or self.ctx.run_id is None:
            return None
        fields.setdefault("elapsed_ms", round((time.monotonic() - self.started) * 1000))
        return CommandProgress(run_id=self.ctx.run_id, call_id=self.call_id, command=self.command, cwd=self.cwd,
                               **fields)  # type: ignore[arg-type]

    async def _send(self, **fields: object) -> None:
        event = self._event(**fields)
        if event is not None and self.ctx.progress is not None:
            await self.ctx.progress(event)

    async def __aenter__(self) -> CommandReporter:
        if self.ctx.progress is not None:
            self.started = time.monotonic()
            await self._send(elapsed_ms=0)
            self._ticker = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(EVERY_SECONDS)
            await self._send(last_line=scrub(self.capture.last_line, self.layout))

    async def ended(self, finished: Finished, log_alias: str | None) -> None:
        capture = self.capture
        if capture.log_cut:  # the kept log is the output's start; its end is in the streams' tails
            data = bytes(capture.stdout.tail or capture.stdout.head) + bytes(capture.stderr.tail or capture.stderr.head)
        else:
            data = bytes(capture.log[-8 * TAIL_CHARS:])
        lines = [line for line in scrub(clean(data[-8 * TAIL_CHARS:]), self.layout).splitlines() if line.strip()]
        tail = "\n".join(lines[-TAIL_LINES:])[-TAIL_CHARS:]
        await self._send(running=False, exit_code=finished.exit_code, killed=finished.killed, tail=tail,
                         elapsed_ms=finished.duration_ms,
                         last_line=lines[-1][-200:] if lines else "", log=log_alias)
