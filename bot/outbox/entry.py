"""One message a person must see, as the outbox keeps it until Slack has answered with its `ts`."""

from __future__ import annotations

import time
import uuid
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field

METADATA_TYPE = "crewagent_outbox"  # message metadata that carries the entry's id, for finding it again
DAY = 24 * 3600.0


def new_id() -> str:
    return uuid.uuid4().hex


class LedgerUnavailable(OSError):
    """The outbox's store cannot be reached or written now (a database away, a full disk)."""


class OutboxEntry(BaseModel):
    """A post into a thread, an edit of a message, or a streamed reply; `lane` orders the entries sent one
    after another.

    A streamed reply is recorded as `stream` before Slack opens its message, with the message's ts once Slack
    has answered (nothing to send yet: at a start it is settled, bot.native.stream), then becomes `finish`
    once its whole text is known: the stream is stopped with the rest of the text, or, when Slack no longer
    streams it, the message is edited to the whole text. `settles` are the dedupe keys of the event the reply answers: they count as handled from the
    moment this entry holds the whole reply (a start claims them again from an entry still waiting)."""

    id: str = Field(default_factory=new_id)
    seq: int = 0  # order of recording (the store's)
    kind: Literal["post", "update", "stream", "finish"]
    channel: str
    thread_ts: str | None = None  # post: the thread it goes into
    target_ts: str | None = None  # update, stream, finish: the message it edits (or streams into; None until opened)
    payload: dict[str, Any]
    created: float = Field(default_factory=time.time)
    state: Literal["pending", "given_up"] = "pending"
    error: str | None = None
    # An attempt may have reached Slack without our hearing back (a timeout, a crash): look before posting again.
    maybe_sent: bool = False
    answers: str | None = None  # stream: what the reply answers (`run:<id>` or `event:<key>`), for the redo to find it
    settles: list[str] = Field(default_factory=list)  # finish: dedupe keys claimed with this entry

    @property
    def lane(self) -> str:
        """Entries of one lane go out in order: a thread's posts; a message's edits."""
        if self.kind == "post":
            return f"post:{self.channel}:{self.thread_ts or '-'}"
        return f"edit:{self.channel}:{self.target_ts}"

    def expired(self, give_up_after: float, now: float | None = None) -> bool:
        return (now if now is not None else time.time()) - self.created > give_up_after


def with_marker(entry_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    """The post's payload with metadata naming the entry, so a resend can first look for it in the thread."""
    return {**payload, "metadata": {"event_type": METADATA_TYPE, "event_payload": {"entry": entry_id}}}


def part_id(entry_id: str, index: int) -> str:
    """The id a long reply's part `index` (1 for the second message) is marked with, found by it again."""
    return f"{entry_id}.{index}"


def marked_entry(message: dict[str, Any]) -> str | None:
    """The outbox entry id a message in Slack carries, if any."""
    metadata = message.get("metadata")
    if not isinstance(metadata, dict) or metadata.get("event_type") != METADATA_TYPE:
        return None
    payload = metadata.get("event_payload")
    entry = payload.get("entry") if isinstance(payload, dict) else None
    return str(entry) if entry else None


class Ledger(Protocol):
    """Where entries are kept: files when embedded (bot.outbox.sqlite_ledger), Postgres for replicas."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def add(self, entry: OutboxEntry) -> None:
        """Record a new entry (sets its seq); LedgerUnavailable when it cannot be recorded now."""

    async def replace(self, entry: OutboxEntry) -> None:
        """A newer payload for an entry not sent yet (coalesced edits)."""

    async def claim(self, entry_id: str) -> bool:
        """Just before a send: False when the entry must not go any more (its writer lost the thread)."""

    async def sent(self, entry_id: str) -> None:
        """Slack has it: the entry is done."""

    async def give_up(self, entry_id: str, error: str) -> None:
        """Never sent; kept (for a while) so the owner can be told."""

    async def pending(self) -> list[OutboxEntry]:
        """Entries this process must send: left by an earlier process here, or by a replica that died."""

    async def take_thread(self, thread: str) -> list[OutboxEntry]:
        """Entries the thread's earlier holder recorded and did not finish (its open streams too), now ours:
        called by the replica that just took the thread over, before the thread's work runs there."""

    async def given_up(self, since: float) -> list[OutboxEntry]:
        """Entries given up since `since` (wall time), oldest first."""
