"""Lines from stdin read ahead by a daemon thread, so a terminal can take `*stop` while a run works.

The thread reads every line as soon as it is typed (or piped). The chat loop takes them in order;
while a run is working it looks at each new line at once: controls act immediately, anything else
waits its turn. A daemon thread, because a read blocked on a terminal must not keep the process
alive after the user pressed Ctrl-C.
"""

from __future__ import annotations

import asyncio
import queue
import sys
import threading
from collections import deque
from collections.abc import Callable

from .render import ReadLine

Prompt = Callable[[str], None]


def stdout_prompt(text: str) -> None:
    """A prompt without a newline, the answer is typed after it."""
    sys.stdout.write(text)
    sys.stdout.flush()


class LineFeed:
    def __init__(self, read_line: ReadLine, prompt: Prompt = stdout_prompt) -> None:
        self.prompt = prompt
        self._loop = asyncio.get_running_loop()
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._arrived = asyncio.Event()
        self._held: deque[str | None] = deque()  # read while a run worked; they come next
        self._ended = False
        threading.Thread(target=self._read, args=(read_line,), name="stdin-feed", daemon=True).start()

    def _read(self, read_line: ReadLine) -> None:
        while True:
            line = read_line("")
            self._lines.put(line)
            try:
                self._loop.call_soon_threadsafe(self._arrived.set)
            except RuntimeError:  # the loop is closed: the chat is over
                return
            if line is None:
                return

    async def fresh(self) -> str | None:
        """The next line read from stdin (held lines are not looked at)."""
        while True:
            self._arrived.clear()
            try:
                return self._lines.get_nowait()
            except queue.Empty:
                await self._arrived.wait()

    def hold(self, line: str | None) -> None:
        """Keep a line read early; `next` returns it before reading more."""
        self._held.append(line)

    async def next(self) -> str | None:
        """The next line in order; None once input has ended."""
        if self._ended:
            return None
        line = self._held.popleft() if self._held else await self.fresh()
        self._ended = line is None
        return line

    def next_blocking(self, prompt: str) -> str | None:
        """For the widget prompts, which ask synchronously; Ctrl-C interrupts the wait."""
        self.prompt(prompt)
        if self._ended:
            return None
        line = self._held.popleft() if self._held else self._lines.get()
        self._ended = line is None
        return line
