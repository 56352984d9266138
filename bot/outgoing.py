"""Everything the bot sends to Slack, as typed messages: what it is, where it goes, and under which lease.

Each kind is a frozen dataclass with a `kind` tag; `Outgoing` is their union, the one thing the port
(bot.slack_port) takes. A message carries the thread's lease it was made under (`HELD` when it is
built), so a send for a thread this replica is known to have lost is dropped wherever it was queued.
Durable kinds (a post, an edit) say whether they must survive a crash: those go through the outbox.
How urgent a paced message is (URGENT / LIVE / BACKGROUND) is said where it is queued
(bot.slack_send), since only the newest state of a message or a line is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from slack_sdk.models.views import View
from slack_sdk.web.async_chat_stream import AsyncChatStream

from .base.lease import HELD, Lease
from .render.message import SlackMessage


def _held() -> Lease | None:
    return HELD.get()


@dataclass(frozen=True)
class Post:
    """A new message (`thread_ts` None: a channel's root message). `durable`: recorded in the outbox first
    and sent until Slack has it; otherwise sent once, now (a status message drawn again anyway)."""

    channel: str
    thread_ts: str | None
    message: SlackMessage
    durable: bool = True
    shows_run: bool = True  # False: says nothing of a run's work, so sent without its writes made durable
    kind: Literal["post"] = "post"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class Edit:
    """A message's new state. `budgeted`: its call was already taken from the edit budget (a paced edit)."""

    channel: str
    ts: str
    message: SlackMessage
    durable: bool = True
    budgeted: bool = False
    kind: Literal["edit"] = "edit"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class Ephemeral:
    """A note only `user` sees."""

    channel: str
    user: str
    text: str
    thread_ts: str | None = None
    kind: Literal["ephemeral"] = "ephemeral"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class Reaction:
    """An emoji put on (`add`) or taken off a message."""

    channel: str
    ts: str
    name: str
    add: bool = True
    kind: Literal["reaction"] = "reaction"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class Upload:
    """A file posted in a thread."""

    channel: str
    thread_ts: str
    filename: str
    content: bytes
    title: str
    kind: Literal["upload"] = "upload"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class OpenModal:
    trigger_id: str
    view: View
    kind: Literal["modal"] = "modal"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class HomeView:
    """A person's Home tab, published whole."""

    user: str
    view: View
    kind: Literal["home"] = "home"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class StatusLine:
    """The assistant status line under a thread ("" clears it)."""

    channel: str
    thread_ts: str
    status: str
    loading_messages: Sequence[str] | None = None
    kind: Literal["status_line"] = "status_line"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class Title:
    """A DM thread's name in the agent view."""

    channel: str
    thread_ts: str
    title: str
    kind: Literal["title"] = "title"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class SuggestedPrompts:
    """The prompts offered in the bot's DM (`thread_ts` None: the DM itself)."""

    channel: str
    thread_ts: str | None
    prompts: Sequence[dict[str, str]]
    title: str | None = None
    kind: Literal["prompts"] = "prompts"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class SessionChange:
    """Slack's agent session of a thread: its status (with a title for a session created now), or, with
    `status` None, its new name."""

    channel: str
    thread_ts: str
    status: str | None = None
    title: str | None = None
    kind: Literal["session"] = "session"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class StreamAppend:
    """Words added to a streamed reply (the first append starts the stream)."""

    stream: AsyncChatStream
    text: str
    kind: Literal["stream_append"] = "stream_append"
    lease: Lease | None = field(default_factory=_held, compare=False)


@dataclass(frozen=True)
class StreamStop:
    """A streamed reply's last words and footer: the stream ends."""

    stream: AsyncChatStream
    text: str | None
    blocks: list[dict[str, Any]] | None = None
    kind: Literal["stream_stop"] = "stream_stop"
    lease: Lease | None = field(default_factory=_held, compare=False)


Outgoing = (
    Post | Edit | Ephemeral | Reaction | Upload | OpenModal | HomeView | StatusLine | Title | SuggestedPrompts
    | SessionChange | StreamAppend | StreamStop
)


@dataclass(frozen=True)
class Delivery:
    """What became of one message. Never an exception: a failed call is logged once by the port and
    described here, so a turn goes on."""

    sent: bool  # Slack has it, or (durable) the outbox keeps it until Slack has it
    ts: str | None = None  # a new message's ts, once Slack has it
    error: BaseException | None = None  # why Slack did not take it (for fallbacks and the log, never for users)
    fenced: bool = False  # not sent: the thread's lease passed to another replica
