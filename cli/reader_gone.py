"""Output to a reader that may go away: `crewagent run … | head -3`.

Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError, wherever it happens:
inside the engine's event handler, the error would cut the run off mid-turn and leave it listed as
`running` with no process behind it. Writes go through `ReaderWatch.guard` instead: the first broken
pipe points stdout at /dev/null, says so once (`on_gone`, which stops the run between turns, as
Ctrl-C does) and every later write is dropped, so the run ends saved and resumable.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


class ReaderWatch:
    def __init__(self, on_gone: Callable[[], None]) -> None:
        self.on_gone = on_gone
        self.gone = False

    def guard(self, write: Callable[[str], None]) -> Callable[[str], None]:
        def guarded(text: str) -> None:
            if self.gone:
                return
            try:
                write(text)
            except BrokenPipeError:
                self.gone = True
                discard_stdout()
                self.on_gone()

        return guarded


def discard_stdout() -> None:
    """Point stdout at /dev/null so later writes (and the interpreter's final flush) do not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout is not a real file (captured in tests)
        pass
