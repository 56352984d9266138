"""One Slack thread as the bot knows it: its key and its stored record, at the bottom of bot/.

Everything above (the stores, lanes, native surfaces, replicas, renderers) names threads with
these; they import nothing else of the bot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from pydantic import BaseModel

from crewagent.core.api.events import RunPhase
from crewagent.core.api.sessions import Session


class ThreadKey(NamedTuple):
    """(team, channel, thread_ts): one Slack thread, one session."""

    team: str
    channel: str
    thread_ts: str

    def __str__(self) -> str:
        return f"{self.team}:{self.channel}:{self.thread_ts}"

    @classmethod
    def parse(cls, text: str) -> ThreadKey | None:
        parts = text.split(":")
        if len(parts) != 3 or not all(parts):
            return None
        return cls(*parts)

    @property
    def session_id(self) -> str:
        return f"slack:{self}"

    @property
    def is_dm(self) -> bool:
        return self.channel.startswith("D")


class ThreadRecord(BaseModel):
    """What the bot keeps per thread: the surface-neutral Session plus Slack message bookkeeping."""

    team: str
    channel: str
    thread_ts: str
    binding: str = "default"  # which channel binding (project + packages) serves this thread
    session: Session
    epoch: int = 0  # bumped whenever a new agent picker / menu / clarify message supersedes older ones
    status_ts: str | None = None  # the run status message, updated in place
    status_run_id: str | None = None
    last_phase: RunPhase | None = None  # of status_run_id, to post the completion message once per completion

    @property
    def key(self) -> ThreadKey:
        return ThreadKey(self.team, self.channel, self.thread_ts)

    @classmethod
    def new(cls, key: ThreadKey, owner: str, binding: str) -> ThreadRecord:
        return cls(
            team=key.team,
            channel=key.channel,
            thread_ts=key.thread_ts,
            binding=binding,
            session=Session(id=key.session_id, owner=owner),
        )


class ThreadBrief(NamedTuple):
    """What a run overview needs of one thread, read without validating its whole session (histories are long)."""

    key: ThreadKey
    binding: str
    owner: str | None
    session_id: str
    run_ids: tuple[str, ...]  # the current run, the last one, the status message's
    widget_run_id: str | None  # the run the pending question belongs to
    widget_message: str | None  # that question's text

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> ThreadBrief | None:
        """From (key, binding, owner, session id, run id, last run id, status run id, widget run, widget text)."""
        key = ThreadKey.parse(str(row[0]))
        if key is None:
            return None
        runs = tuple(dict.fromkeys(str(r) for r in row[4:7] if r))
        text = str(row[8]) if row[8] else None
        return cls(key, str(row[1] or "default"), row[2], str(row[3] or key.session_id), runs, row[7], text)


# The fields of a ThreadBrief, as JSON paths into a stored ThreadRecord (both stores query them).
BRIEF_PATHS = (
    "binding", "session.owner", "session.id", "session.run_id", "session.last_run_id", "status_run_id",
    "session.pending_widget.run_id", "session.pending_widget.payload.message",
)
