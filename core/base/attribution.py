"""Who a piece of work is done for: the person and the channel a request came from, and the run it works on.

Usage and audit entries are written deep below the surface (a model call, an approval inside the
pump) where nobody passes a Slack user id down. The surface sets the attribution once per request
(`attributed(...)`), and everything the request does, in its own task or in tasks and threads it
starts, reads it with `current()`: asyncio tasks and `asyncio.to_thread` copy the context.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace

TERMINAL_CHANNEL = "terminal"


@dataclass(frozen=True)
class Attribution:
    person: str = ""  # a Slack user id, or the terminal user's login name; "" when nobody asked (a start-up resume)
    channel: str = ""  # a Slack channel id, or "terminal"
    run_id: str | None = None  # the run a model call works for (None: agent chat outside a run)


_current: ContextVar[Attribution] = ContextVar("crewagent_attribution", default=Attribution())


def current() -> Attribution:
    return _current.get()


@contextmanager
def attributed(
    person: str | None = None, channel: str | None = None, run_id: str | None = None
) -> Iterator[Attribution]:
    """Attribute what runs inside to `person` / `channel` / `run_id`; a value left None keeps the outer one."""
    outer = _current.get()
    changes = {k: v for k, v in (("person", person), ("channel", channel), ("run_id", run_id)) if v is not None}
    token = _current.set(replace(outer, **changes))
    try:
        yield _current.get()
    finally:
        _current.reset(token)
