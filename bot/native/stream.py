"""One assistant reply streamed into its thread while the model writes it.

Pieces go out through slack_sdk's chat stream (chat.startStream / appendStream / stopStream). The
first visible piece is sent at once; later ones are coalesced to one append per `interval` per
reply and to the shared appendStream budget (Tier 4), so hundreds of replies streaming at once
send bigger pieces, not more calls. When the reply is complete the stream is stopped with the
agent's name underneath.

An answer cut off by a lost model connection is closed with a short note; the answer asked for
again streams into a new message.

A streamed reply is durable (bot.outbox): it is recorded with what it answers before Slack opens its
message, the message's ts once Slack has answered (before any piece after the first is shown; a start that
finds a record without one looks for the message in the thread), and its whole text before the stream is stopped,
so the outbox finishes it even if this process dies. A reply that an earlier process left cut off is
written again into that same message (`adopted`): nothing is shown of it until it is whole, then the
message is edited to the whole text. So is a streamed message whose final text does not go on from the
words it shows (the model rewrote an earlier sentence): its whole text is recorded, then its stream is
stopped and the message edited to it, once, even if this process dies between the two.

Slack takes at most STREAM_LIMIT characters in one streamed message (each start, append and stop call
carries at most as many). A reply that would pass it is cut at a clean break (bot.render.markdown.clean_cut):
that message's text is recorded and its stream stopped, and the reply goes on streaming in a new message,
as a long reply posted whole goes on in parts.

If Slack refuses streaming in this thread the reply is posted and then edited in place, through the
status board so the edits share chat.update's budget: the first words are posted only while that
budget has room beyond what is kept for urgent edits (else the reply is posted whole when it is
done, by chat.postMessage, whose limit is per channel), the growing text is a LIVE edit and the
final text an URGENT one, sent ahead of every plan redraw. If the stream
expired on Slack's side, the streamed message is finished with chat.update. If the user pressed
Slack's stop control, the run is stopped as `*stop` would.

A stop never leaves a message looking live. Slack's stop on a message, the agent session's Stop, `*stop`
and the run's Stop button cancel the model call whose words the stream shows, so each step that talks to
Slack or the outbox runs to its end first (a start cut off in flight would leave a message Slack opened
that nothing stops). A reply the person stopped ends every message it opened as it stands, through the
outbox: also the next message of a long reply whose full message they stopped as it handed over.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from slack_sdk.web.async_chat_stream import AsyncChatStream

from crewagent.core.api.sessions import outputs

from ..outbox.courier import STOPPED_BY_USER, Courier
from ..outbox.entry import OutboxEntry
from ..render import blocks
from ..render.markdown import MARKDOWN_LIMIT, clean_cut, markdown_messages
from ..render.message import SlackMessage, defused
from .fallbacks import STREAM, Fallbacks, error_code
from ..outgoing import Delivery, Post, StreamAppend, StreamStop
from ..render.mrkdwn import defuse_markdown_mentions
from ..slack_port import SlackPort
from ..slack_send import CallBudget, Priority
from ..status import StatusBoard
from ..base.thread import ThreadKey

log = logging.getLogger(__name__)

EXPIRED = "message_not_in_streaming_state"
CUT_OFF_NOTE = "_(connection lost, retrying)_"
# Slack's `markdown_text` holds 12,000 characters per start, append or stop call, and a message's markdown
# 12,000 together: one streamed message takes no more than that in all (Slack answers `msg_too_long`).
STREAM_LIMIT = 12_000
STEP_GRACE = 1.0  # seconds a step of the stream may take to end once its call was cancelled (a shutdown waits that long)


def _measure(text: str) -> int:
    """A piece's length as Slack counts it: the text that goes out, with its mentions defused."""
    return len(defuse_markdown_mentions(text))


@dataclass(frozen=True)
class _Ending:
    """How a streamed reply ends in the message streaming now and after it."""

    rest: str | None  # what the stream is stopped with; None: the message is edited to `current` instead
    current: str  # the whole text the message streaming now ends with
    more: list[str]  # the reply's text after it, one message each (a long reply's further parts)
    earlier: list[str] = field(default_factory=list)  # the reply's earlier messages edited to these texts


def _spread(text: str, slots: int) -> list[str]:
    """`text` over at least `slots` messages (the ones a reply already has), cut at clean breaks into
    about even pieces, and into further messages when it does not fit them."""
    pieces: list[str] = []
    start = 0
    for left in range(slots, 1, -1):
        cut = clean_cut(text, start, min(MARKDOWN_LIMIT, -(-(len(text) - start) // left)))
        pieces.append(text[start:cut].strip())
        start = cut
    tail = text[start:].strip()
    return pieces + ([m.text for m in markdown_messages(tail)] if tail else [""])


@dataclass(frozen=True)
class _FullMessage:
    """A streamed message that reached Slack's limit, until the reply's next message is recorded."""

    stream: AsyncChatStream
    record: OutboxEntry | None
    payload: dict[str, Any]  # its whole text, as the outbox finishes it
    base: int
    size: int


@dataclass(frozen=True)
class ReplyTarget:
    """Where a reply goes, for whom, and what it answers."""

    key: ThreadKey
    recipient: str | None
    agent: outputs.AgentCard | None
    answers: str | None = None  # `run:<id>` or `event:<key>`: how a redo after a restart finds the message
    settles: tuple[str, ...] = ()  # dedupe keys of the event, claimed together with the reply's whole text


class ReplyStream:
    def __init__(
        self,
        *,
        io: SlackPort,
        board: StatusBoard,
        fallbacks: Fallbacks,
        budget: CallBudget,
        target: ReplyTarget,
        interval: float,
        on_user_stop: Callable[[], None] | None = None,
    ) -> None:
        self.io, self.board, self.fallbacks, self.budget = io, board, fallbacks, budget
        self.target, self.interval = target, interval
        self.key, self.recipient, self.agent = target.key, target.recipient, target.agent
        self.on_user_stop = on_user_stop
        self.text = ""  # what the model has written so far (leading blanks dropped)
        self.sent = 0  # how much of it Slack has
        self.base = 0  # where the message streaming now starts in `text` (after earlier full messages)
        self._part_size = 0  # what that message holds, as Slack counts it
        # Outside a DM Slack streams to one named person; with nobody to name, post and edit instead.
        self.streaming = fallbacks.allows(str(self.key), STREAM) and (self.key.is_dm or bool(self.recipient))
        self.stopped = False  # the user stopped it from Slack (or the thread passed on): nothing more is sent
        self.fenced = False  # the thread passed to another replica, which settles what this stream recorded
        self._stream: AsyncChatStream | None = None
        self._ts: str | None = None  # the posted (or expired streamed) message when not streaming
        self._last = 0.0
        self._record: OutboxEntry | None = None  # the streamed message as the outbox keeps it
        self._earlier: list[str] = []  # the ts of this reply's messages before the one streaming now
        self._full: _FullMessage | None = None  # the last of them, while it still streams
        self.adopted = False  # writing again into a message an earlier process left cut off
        outbox = _stream_outbox(io)
        orphan = outbox.adopt_stream(target.answers) if outbox is not None and target.answers else None
        if orphan is not None:
            self._record, self._ts, self.adopted, self.streaming = orphan, orphan.target_ts, True, False
            self._earlier = [str(ts) for ts in orphan.payload.get("earlier") or []]

    @property
    def started(self) -> bool:
        return self.sent > 0

    async def add(self, piece: str) -> None:
        if self.stopped:
            return
        self.text += piece if self.text else piece.lstrip()
        if len(self.text) == self.sent or self.adopted:
            return
        now = time.monotonic()
        if self.started and now - self._last < self.interval:
            return
        if self.started and self.streaming and not self.budget.take():
            return  # the workspace's append budget is spent for now: this piece goes with the next
        self._last = now
        await self._step(self._send_pending())

    async def _send_pending(self) -> None:
        pending = self.text[self.sent :]
        if pending.endswith("<"):  # the next piece may make it a mention: send it with that piece
            pending = pending[:-1]
        if self.streaming and (not pending or await self._stream_to(self.sent + len(pending))):
            return
        # Posting the first words commits to an edit with the whole text later: only with room for it.
        if not self.stopped and (self._ts is not None or self.board.room()):
            await self._show(final=False)

    async def finish(self, text: str, *, answered: bool = True) -> None:
        """The model's whole reply: stop the stream with it (or show it the old way). `answered`: the reply
        settles the event it answers (not so a reply cut off and asked for again). A reply the person stopped
        ends as it stands."""
        await self._step(self._finish(text, list(self.target.settles) if answered else []))

    async def _step(self, step: Coroutine[Any, Any, None]) -> None:
        """A step that may start, append to, record or stop a stream runs to its end even if the call it runs
        in is cancelled (`_uninterrupted`). Posting and editing the old way runs inline, as before: its final
        edit is queued before anything else runs, ahead of the plan redraws waiting for the edit budget."""
        if self.streaming or self._stream is not None or self._record is not None or self._full is not None:
            await _uninterrupted(step)
        else:
            await step

    async def _finish(self, text: str, settles: list[str]) -> None:
        if self.stopped:
            if not self.fenced:
                await self._close_stopped(settles)
            return
        whole = text.strip()
        header = blocks.agent_header(self.agent)
        footer = [defused(blocks.context(header))] if header else None
        self._reopen_full()
        ending = self._ending(whole)
        if await self._finish_durably(whole, ending, footer, settles):
            return
        if self.streaming and (ending.rest or self._stream is not None):
            stream = self._stream or await self._open()
            rest = defuse_markdown_mentions(ending.rest) or None if ending.rest is not None else None
            delivery = await self.io.send(StreamStop(stream, rest, footer if ending.rest is not None else None))
            if delivery.fenced:  # the thread is another replica's now: it settles the record
                return
            if delivery.sent and ending.rest is not None:
                self.text, self.sent = whole, len(whole)
                await self._forget_record()  # Slack has it whole: no later start may settle or adopt it
                for part in ending.more:
                    await self.io.send(Post(self.key.channel, self.key.thread_ts, markdown_messages(part)[0]))
                return
            if delivery.sent:
                self._ts = stream.ts  # stopped; the message is edited to the whole text below
            else:
                self._failed(delivery)
            if self.stopped:
                return
        self.text = whole
        await self._show(final=True)
        await self._forget_record()  # shown the old way; the final edit is in the outbox

    def _ending(self, whole: str) -> _Ending:
        """Where the whole reply ends the message streaming now: with the rest of its words when they go on
        from what it shows, else edited to its whole text; and what then goes on in further messages."""
        rest = None if self.adopted else self._rest(whole)
        if rest is not None:
            start = len(whole) - len(rest)
            cut = clean_cut(whole, start, STREAM_LIMIT - self._part_size, _measure)
            rest, start = rest[: cut - start], self.base
        elif self._earlier and (self.adopted or not whole.startswith(self.text[: self.base])):
            pieces = _spread(whole, len(self._earlier) + 1)  # the reply is written anew over all its messages
            slot = len(self._earlier)
            return _Ending(None, pieces[slot], pieces[slot + 1 :], pieces[:slot])
        else:
            start = self.base if whole.startswith(self.text[: self.base]) else 0  # else nothing may be lost
            cut = clean_cut(whole, start, MARKDOWN_LIMIT)
        after = whole[cut:].strip()
        return _Ending(rest, whole[start:cut], [m.text for m in markdown_messages(after)] if after else [])

    async def _finish_durably(
        self, whole: str, ending: _Ending, footer: list[dict[str, Any]] | None, settles: list[str]
    ) -> bool:
        """A recorded stream (or an adopted message): the outbox records the whole text, then stops the stream
        with the rest (or edits the message to its whole text) and posts the reply's further parts. False
        when the reply goes the old way."""
        outbox, record = _stream_outbox(self.io), self._record
        if outbox is None or record is None or not (self.adopted or self.streaming):
            return False
        current = self._part(ending.current, False if ending.earlier else None)
        first, *more = (message.payload() for message in current)
        more += [message.payload() for part in ending.more for message in markdown_messages(part)]
        earlier = [[ts, self._part(text, index == 0)[0].payload()]
                   for index, (ts, text) in enumerate(zip(self._earlier, ending.earlier))]
        payload = {"rest": defuse_markdown_mentions(ending.rest or ""), "replace": ending.rest is None,
                   "blocks": footer, "whole": first, "more": more, "earlier": earlier}
        self._record = None
        error = await outbox.finish_stream(record, payload, settles)
        self.text, self.sent = whole, len(whole)
        if error == STOPPED_BY_USER:
            self._user_stopped()
        return True

    def _user_stopped(self) -> None:
        """The person pressed Slack's stop on this reply: nothing more is sent, and the run stops too."""
        self.stopped = True
        if self.on_user_stop is not None:
            asyncio.get_running_loop().call_soon(self.on_user_stop)

    async def _close_stopped(self, settles: list[str]) -> None:
        """The reply was stopped: every message it opened that still streams ends as it stands (through the
        outbox once recorded), also the next message of a long reply whose full one the person stopped as it
        handed over; the message they stopped stays as they left it."""
        await self._finish_full()
        stream, record, self._stream, self._record = self._stream, self._record, None, None
        outbox = _stream_outbox(self.io)
        if record is not None and outbox is not None:
            if stream is None:  # the message they stopped: it needs nothing more
                await outbox.forget_stream(record)
            else:
                await outbox.finish_stream(record, self._as_it_stands(), settles)
        elif stream is not None and stream.ts:
            await self.io.send(StreamStop(stream, None, None))

    def _as_it_stands(self) -> dict[str, Any]:
        """The streaming message's whole text as Slack shows it, as the outbox finishes it: stopped with no more
        words (or, when Slack no longer takes the stream, edited to that text)."""
        first, *more = (message.payload() for message in self._part(self.text[self.base : self.sent]))
        return {"rest": "", "replace": False, "blocks": None, "whole": first, "more": more}

    def _part(self, text: str, first: bool | None = None) -> list[SlackMessage]:
        """A streamed message's whole text as a message: with the agent's name above when it is the reply's
        first (by default: when no full message came before it)."""
        first = self.base == 0 if first is None else first
        return markdown_messages(text, header=blocks.agent_header(self.agent) if first else None)

    def _rest(self, whole: str) -> str | None:
        """What of the whole reply Slack has not shown yet; None when it does not go on from what Slack shows.
        The whole reply comes stripped, so blanks at the end of what was shown do not count."""
        shown = self.text[: self.sent]
        if whole.startswith(shown):
            return whole[len(shown) :]
        return whole[len(shown.rstrip()) :] if whole.startswith(shown.rstrip()) else None

    async def _forget_record(self) -> None:
        record, self._record, outbox = self._record, None, _stream_outbox(self.io)
        if record is not None and outbox is not None:
            await outbox.forget_stream(record)

    async def cut_off(self) -> bool:
        """The model's answer was cut off and is asked for again: what Slack shows of it ends with a note.
        False when nothing of it reached Slack."""
        outbox = _stream_outbox(self.io)
        if self.adopted and self._record is not None and outbox is not None:
            outbox.return_stream(self._record)  # the answer asked for again writes into it
            self._record = None
        if not self.started or self.stopped:
            return False
        await self.finish(f"{self.text[: self.sent]}\n\n{CUT_OFF_NOTE}", answered=False)
        return True

    # ---- streaming ----------------------------------------------------------------

    async def _open(self) -> AsyncChatStream:
        self._stream = await self.io.open_stream(self.key, self.recipient)
        return self._stream

    async def _stream_to(self, end: int) -> bool:
        """Stream the words up to `end`; a message that would pass Slack's limit ends at a clean break and the
        reply goes on in a new one. False when Slack refused a piece."""
        while self.sent < end and not self.stopped:
            if self._part_size == 0:  # a new message does not open with the blanks the cut left
                while self.sent < end and self.text[self.sent].isspace():
                    self.sent += 1
                self.base = self.sent
            cut = clean_cut(self.text[:end], self.sent, STREAM_LIMIT - self._part_size, _measure)
            if cut > self.sent and not await self._append(self.text[self.sent : cut]):
                return False
            if cut < end and not self.stopped:
                await self._end_part()
        return True

    async def _end_part(self) -> None:
        """The streaming message is full: the next words open a new message. The full one keeps streaming
        until that new message is recorded (its record names the full one), and only then is its text
        recorded whole and its stream stopped: a process that dies at any point leaves a record from which
        a redo writes the reply again over all its messages."""
        stream, record = self._stream, self._record
        if stream is None:
            return
        self._full = _FullMessage(stream, record, self._as_it_stands(), self.base, self._part_size)
        if stream.ts:
            self._earlier.append(stream.ts)
        self._stream, self._record, self._part_size, self.base = None, None, 0, self.sent

    async def _finish_full(self) -> None:
        """The full message's text is recorded whole and its stream stopped (the outbox does both)."""
        full, self._full, outbox = self._full, None, _stream_outbox(self.io)
        if full is None:
            return
        if outbox is not None and full.record is not None:
            if await outbox.finish_stream(full.record, full.payload, []) == STOPPED_BY_USER:
                self._user_stopped()  # as it handed over: the next message must not be left looking live
                await self._close_stopped(list(self.target.settles))
        else:
            await self.io.send(StreamStop(full.stream, None, None))

    def _reopen_full(self) -> None:
        """The reply ended before its next message began: the full message is the one it ends in."""
        full, self._full = self._full, None
        if full is not None:
            self._stream, self._record, self.base, self._part_size = full.stream, full.record, full.base, full.size
            self._earlier = self._earlier[:-1] if full.stream.ts else self._earlier

    async def _append(self, pending: str) -> bool:
        outbox = _stream_outbox(self.io)
        opening = None
        if self._stream is None and self._record is None and outbox is not None:
            # Recorded before Slack opens the message: a process that dies (or loses the thread) before it hears
            # the message's ts leaves a record from which the next holder finds the message and stops it.
            key, answers = self.key, self.target.answers or ""
            opening = await outbox.record_stream(key.channel, key.thread_ts, None, answers, list(self._earlier))
        stream = self._stream or await self._open()
        piece = defuse_markdown_mentions(pending)
        delivery = await self.io.send(StreamAppend(stream, piece))
        if delivery.fenced:
            self.stopped = self.fenced = True  # the thread passed to another replica: this reply shows nothing more
            return True
        if opening is not None and outbox is not None:
            if stream.ts:  # recorded before the next piece goes out
                self._record = await outbox.stream_opened(opening, stream.ts)
            else:
                await outbox.forget_stream(opening)  # Slack did not open it
        if not delivery.sent:
            await self._finish_full()
            self._failed(delivery)
            return False
        self.sent += len(pending)
        self._part_size += len(piece)
        await self._finish_full()
        return True

    def _sent_now(self) -> None:
        self.sent = len(self.text)

    def _failed(self, delivery: Delivery) -> None:
        exc: BaseException | str = delivery.error or "stream refused"
        code = exc if isinstance(exc, str) else error_code(exc)
        self.streaming = False
        if code == STOPPED_BY_USER:
            self._stream = None  # the message the person stopped stays as they left it
            self._user_stopped()
            return
        if self._stream is not None and self._stream.ts:
            self._ts = self._stream.ts  # the streamed message stays; it is finished with chat.update
        if code != EXPIRED:
            self.fallbacks.fall_back(str(self.key), STREAM, exc)

    # ---- post + update --------------------------------------------------------------

    def _messages(self) -> list[SlackMessage]:
        """The reply from the message shown last on (earlier full streamed messages stay as they are)."""
        return self._part(self.text[self.base :])

    async def _show(self, *, final: bool) -> None:
        if self.base and not self.text[self.base :].strip():  # the reply ended with its last full message
            self._sent_now()
            return
        messages = self._messages()
        channel, thread_ts = self.key.channel, self.key.thread_ts
        rest = messages[1:] if final else []
        if self._ts is None:  # the first words only while the reply is written; the whole reply durably
            self._ts = (await self.io.send(Post(channel, thread_ts, messages[0], durable=final))).ts
        else:
            first = messages[0]
            self.board.schedule(channel, self._ts, lambda: first, priority=Priority.URGENT if final else Priority.LIVE)
        for message in rest:
            await self.io.send(Post(channel, thread_ts, message))
        self._sent_now()


async def _uninterrupted(step: Coroutine[Any, Any, None]) -> None:
    """Run one step of a stream to its end even when the call it runs in is cancelled, then pass the
    cancellation on. A stop cancels the model call whose pieces these are; cut off inside a Slack call or the
    outbox, a step could leave a message Slack started that the stream never learns of, words Slack took
    that it shows again, or a full message handed over to one neither recorded nor stopped: a stream left
    looking live, or a fragment."""
    task = asyncio.ensure_future(step)
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        done, _ = await asyncio.wait({task}, timeout=STEP_GRACE)
        if not done:
            task.cancel()  # stuck (Slack or the outbox's store away): it is given up as before
        elif not task.cancelled() and (error := task.exception()) is not None:  # the stop goes on regardless
            log.warning("a stream step failed as its reply was stopped", extra={"error": type(error).__name__})
        raise


def _stream_outbox(io: SlackPort) -> Courier | None:
    """The outbox, when the bot has one that keeps streamed replies (tests may run without)."""
    return io.outbox if isinstance(io.outbox, Courier) else None
