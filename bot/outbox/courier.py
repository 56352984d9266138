"""Sends the outbox: each lane in order, what Slack could not take now again with back-off, for a day.

A post or an edit is recorded first, then sent at once when nothing older waits in its lane;
otherwise it waits its turn (the caller gets None: not shown yet). An entry is done once Slack has
answered. A failure that passes (a 5xx, a 429 after the SDK's own retries, a timeout, a dropped
connection) is tried again with growing back-off, up to BACKOFF_CAP seconds apart, so a message is
shown a few seconds after Slack is back; 429s honour Retry-After. An error that retrying cannot fix
(`channel_not_found`, `invalid_blocks`, …) or a day of failures gives the entry up: it is recorded,
logged, and shown on the owner's Home tab.

A post that may already have reached Slack (an answer lost in a timeout, a process killed between
Slack's answer and the record, an entry taken over from a replica that died) is first looked for in
its thread by the entry id its metadata carries (`conversations.replies`), so nothing is posted twice.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from ..slack_client import failure_code, retry_after, transient_failure
from ..waits import wait_set
from .entry import DAY, Ledger, LedgerUnavailable, OutboxEntry, part_id, with_marker
from .thread_lookup import STOPPED_BY_USER, find_marked, stop_streaming

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.5
BACKOFF_CAP = 4.0  # seconds between attempts at most: shown soon after Slack is back
RECORD_RETRY = 1.0  # seconds between attempts to record an entry when the store cannot take it
CONCURRENCY = 8  # lanes sent at once
RESTART_NOTE = "\n\n_(interrupted by a restart; writing this reply again…)_"
TAKEN_OVER_NOTE = "\n\n_(interrupted; writing this reply again…)_"  # another replica left it: nothing restarted here

Result = Literal["sent", "retry", "refused"]
FENCED = "fenced"  # an entry left to the replica that holds its thread now (its writer lost the thread)


@dataclass
class _Lane:
    entries: deque[OutboxEntry] = field(default_factory=deque)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    due: float = 0.0  # monotonic time of the next attempt
    failures: int = 0


@dataclass
class _Attempt:
    result: Result
    ts: str | None = None
    error: str | None = None
    wait: float = 0.0


class Courier:
    def __init__(
        self,
        client: AsyncWebClient,
        ledger: Ledger,
        *,
        before_send: Callable[[], Awaitable[None]] | None = None,
        give_up_after: float = DAY,
        adopt_every: float = 0.0,
    ) -> None:
        """`adopt_every` > 0: look this often for entries a dead replica left (Postgres ledgers)."""
        self.client = client
        self.ledger = ledger
        self.before_send = before_send
        self.give_up_after = give_up_after
        self.adopt_every = adopt_every
        self.sent = 0
        self.given_up = 0
        self._lanes: dict[str, _Lane] = {}
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._loop_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._record_failing = False
        self._open = False  # `open` opened the ledger, so `close` closes it
        self.open_streams: list[OutboxEntry] = []  # streamed replies an earlier process left unfinished
        self._settles_left: list[str] = []
        self._orphans: dict[str, OutboxEntry] = {}  # those settled, by what they answer, until a redo adopts one

    # ---- what the port calls -----------------------------------------------------

    async def post(self, channel: str, thread_ts: str | None, payload: dict[str, Any]) -> str | None:
        """Record the post, send it if its turn has come; its ts once Slack has it, else None (sent later)."""
        entry = OutboxEntry(kind="post", channel=channel, thread_ts=thread_ts, payload={})
        entry.payload = with_marker(entry.id, payload)
        attempt = await self._submit(entry)
        return attempt.ts if attempt is not None and attempt.result == "sent" else None

    async def update(self, channel: str, ts: str, payload: dict[str, Any]) -> bool:
        """Record the edit (replacing an older one still waiting for the same message) and send it in turn.
        False only when Slack refused it for good."""
        lane = self._lanes.get(f"edit:{channel}:{ts}")
        waiting = lane.entries[-1] if lane is not None and lane.entries else None
        coalesce = waiting is not None and waiting.kind == "update"
        if waiting is not None and lane is not None and coalesce and (len(lane.entries) > 1 or not lane.lock.locked()):
            waiting.payload = payload  # only the newest state of a message matters
            await self._record(self.ledger.replace, waiting)
            self._kick()
            return True
        attempt = await self._submit(OutboxEntry(kind="update", channel=channel, target_ts=ts, payload=payload))
        return attempt is None or attempt.result != "refused"

    # ---- streamed replies (bot.native.stream) ------------------------------------

    async def record_stream(
        self, channel: str, thread_ts: str, ts: str | None, answers: str, earlier: list[str] | None = None
    ) -> OutboxEntry:
        """A streamed reply's message: recorded (nothing is sent) so a start can settle it, before Slack opens it
        (`ts` None, then `stream_opened`). `earlier`: the reply's messages before it, already full, which a redo
        writes its whole reply into too."""
        payload: dict[str, Any] = {"earlier": earlier} if earlier else {}
        entry = OutboxEntry(kind="stream", channel=channel, thread_ts=thread_ts, target_ts=ts, payload=payload)
        entry.answers = answers
        await self._record(self.ledger.add, entry)
        return entry

    async def stream_opened(self, entry: OutboxEntry, ts: str) -> OutboxEntry:
        """Slack opened the message recorded before its start: its ts is recorded too."""
        entry.target_ts = ts
        await self._record(self.ledger.replace, entry)
        return entry

    async def finish_stream(self, entry: OutboxEntry, payload: dict[str, Any], settles: list[str]) -> str | None:
        """The streamed message's whole text: recorded first (with the dedupe keys it settles), then the stream
        is stopped with `payload["rest"]` (or, with `payload["replace"]`, stopped and the message edited to
        `payload["whole"]`, and the reply's earlier messages to `payload["earlier"]`: `[ts, body]` each),
        and `payload["more"]` posted after it. Slack's error code when it refused the stop
        (`stopped_by_user`, …), else None (finished, or finished later)."""
        entry.kind, entry.payload, entry.settles = "finish", payload, settles
        await self._record(self.ledger.replace, entry)
        attempt = await self._submit(entry, recorded=True)
        return attempt.error if attempt is not None else None

    def adopt_stream(self, answers: str) -> OutboxEntry | None:
        """The message an earlier process streamed for `answers` and left cut off (settled at start), for the
        redo to write the whole reply into; None when there is none."""
        return self._orphans.pop(answers, None)

    def return_stream(self, entry: OutboxEntry) -> None:
        """An adopted message whose redo was cut off in turn: the next answer takes it."""
        if entry.answers:
            self._orphans[entry.answers] = entry

    def settles_left(self) -> list[str]:
        """Dedupe keys of replies an earlier process (or the thread's previous holder) recorded whole but did not
        show, taken up since this was last asked: their events count as handled, so no redo asks again."""
        keys, self._settles_left = self._settles_left, []
        return keys

    async def settle_streams(self, note_text: str = RESTART_NOTE) -> int:
        """At start-up, before new work: every stream an earlier process left open is stopped (so it no longer
        looks live) with a note that it is being written again, and kept for the redo of what it answers.
        Returns how many."""
        left, self.open_streams = self.open_streams, []
        note = [{"type": "markdown_text", "text": note_text}]
        for entry in left:
            if entry.target_ts:
                await self._stop_left(entry, note)
            elif not await self._stop_unrecorded(entry, note, left):
                continue
            if entry.answers and not entry.expired(self.give_up_after):
                older = self._orphans.get(entry.answers)  # a long reply's earlier message: the newer names it
                self._orphans[entry.answers] = entry
                if older is not None:
                    await self.forget_stream(older)
            else:
                await self.forget_stream(entry)
        return len(left)

    async def _stop_left(self, entry: OutboxEntry, note: list[dict[str, Any]]) -> None:
        try:
            await self.client.chat_stopStream(channel=entry.channel, ts=entry.target_ts or "", chunks=note)
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:  # already stopped, expired, or away
            log.info("a stream left open was not stopped", extra={"error": failure_code(exc), "channel": entry.channel})

    async def _stop_unrecorded(self, entry: OutboxEntry, note: list[dict[str, Any]], left: list[OutboxEntry]) -> bool:
        """A stream recorded before Slack opened its message, by a process that died (or lost the thread) before
        it recorded the message's ts: the bot's newest message in the thread since then that still streams is
        that message. Each unmarked message of the bot is asked to stop, newest first (one that does not stream
        refuses); the one that stops is recorded as the stream's. False when there is none (Slack never opened
        it: the record is forgotten) or the thread cannot be read now (it is looked at again at the next start)."""
        known = {other.target_ts for other in left if other.target_ts}
        try:
            ts = await stop_streaming(self.client, entry, known, note)
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.info("a stream recorded before it opened was not looked for", extra={"error": failure_code(exc)})
            self.open_streams.append(entry)
            return False
        if ts is None:
            await self.forget_stream(entry)
            return False
        await self.stream_opened(entry, ts)
        return True

    async def take_thread(self, thread: str) -> int:
        """A thread this replica has just taken over, before its work runs here: what the previous holder
        recorded for it and did not send goes out from here, and a stream it left open is stopped and kept
        for the redo (the resumed run, or the event handled again), which writes the whole reply into it.
        Returns how many streams were left open."""
        self._take(await self.ledger.take_thread(thread))
        self._kick()
        return await self.settle_streams(TAKEN_OVER_NOTE) if self.open_streams else 0

    async def forget_stream(self, entry: OutboxEntry) -> None:
        """A recorded stream that needs nothing more (settled long ago, or replaced by a redo's own entry)."""
        await self._mark(self.ledger.sent(entry.id))

    async def _submit(self, entry: OutboxEntry, *, recorded: bool = False) -> _Attempt | None:
        if not recorded:
            await self._record(self.ledger.add, entry)
        lane = self._lanes.setdefault(entry.lane, _Lane())
        lane.entries.append(entry)
        self._idle.clear()
        if len(lane.entries) > 1 or lane.lock.locked() or lane.due > time.monotonic():
            self._kick()
            return None  # older entries go first
        attempt = await self._send_head(lane, entry)
        if lane.entries:
            self._kick()
        elif not lane.lock.locked() and self._lanes.get(entry.lane) is lane:
            del self._lanes[entry.lane]  # an idle lane costs nothing
        return attempt

    async def _record(self, write: Callable[[OutboxEntry], Awaitable[None]], entry: OutboxEntry) -> None:
        """Nothing is sent before it is recorded: while the store cannot take it, the caller waits."""
        while True:
            try:
                await write(entry)
            except (LedgerUnavailable, TimeoutError) as exc:
                if not self._record_failing:
                    log.error("cannot record an outgoing Slack message; waiting for the store", extra={"error": str(exc)})
                self._record_failing = True
                await asyncio.sleep(RECORD_RETRY)
                continue
            if self._record_failing:
                log.info("outgoing Slack messages are recorded again")
                self._record_failing = False
            return

    # ---- life -----------------------------------------------------------------------

    async def open(self) -> int:
        """Open the store and take up what an earlier process (or a dead replica) left unsent; returns how
        many entries that was."""
        await self.ledger.open()
        self._open = True
        return await self.start()

    async def start(self) -> int:
        """Take up what an earlier process (or a dead replica) left unsent; returns how many entries."""
        left = await self.ledger.pending()
        self._take(left)
        self._kick()
        return len(left)

    def _take(self, entries: list[OutboxEntry]) -> None:
        for entry in sorted(entries, key=lambda e: e.seq):
            if entry.kind == "finish":
                self._settles_left += entry.settles
            if entry.kind == "stream":  # nothing to send: settled at start-up (bot.native.stream)
                if all(e.id != entry.id for e in self.open_streams):
                    self.open_streams.append(entry)
                continue
            lane = self._lanes.setdefault(entry.lane, _Lane())
            if any(e.id == entry.id for e in lane.entries):
                continue
            entry.maybe_sent = entry.kind in ("post", "finish")  # it may have reached Slack before the record said so
            head = lane.entries.popleft() if lane.lock.locked() and lane.entries else None
            lane.entries = deque(sorted([*lane.entries, entry], key=lambda e: e.seq))
            if head is not None:
                lane.entries.appendleft(head)
            self._idle.clear()

    async def idle(self, timeout: float | None = None) -> bool:
        """True once nothing waits to be sent (within `timeout` seconds)."""
        if not self.waiting():
            return True
        return await wait_set(self._idle, timeout)

    def waiting(self) -> int:
        return sum(len(lane.entries) for lane in self._lanes.values())

    async def close(self, grace: float = 0.0) -> None:
        """Send what can go within `grace` seconds, then stop; what is left stays recorded for the next start."""
        if grace > 0:
            await self.idle(grace)
        task, self._loop_task = self._loop_task, None
        for running in [*self._tasks, *([task] if task else [])]:
            running.cancel()
        await asyncio.gather(*self._tasks, *([task] if task else []), return_exceptions=True)
        self._tasks.clear()
        if self._open:
            self._open = False
            await self.ledger.close()

    # ---- the loop ---------------------------------------------------------------------

    def _kick(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.create_task(self._run(), name="outbox")
        self._wake.set()

    async def _run(self) -> None:
        next_adopt = time.monotonic() + self.adopt_every
        while True:
            self._wake.clear()
            now = time.monotonic()
            if self.adopt_every > 0 and now >= next_adopt:
                next_adopt = now + self.adopt_every
                await self._adopt()
            wait = math.inf if self.adopt_every <= 0 else max(0.0, next_adopt - now)
            for key, lane in list(self._lanes.items()):
                if not lane.entries:
                    if not lane.lock.locked():
                        del self._lanes[key]
                    continue
                if lane.lock.locked() or any(t.get_name() == key for t in self._tasks):
                    continue
                if lane.due > now:
                    wait = min(wait, lane.due - now)
                elif len(self._tasks) < CONCURRENCY:
                    task = asyncio.create_task(self._drain(lane), name=key)
                    self._tasks.add(task)
                    task.add_done_callback(self._done)
            if not self.waiting():
                self._idle.set()
            await wait_set(self._wake, wait)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("the outbox lane stopped", exc_info=task.exception())
        self._wake.set()

    async def _adopt(self) -> None:
        try:
            self._take(await self.ledger.pending())
        except (LedgerUnavailable, TimeoutError):
            return  # looked for again at the next round
        if self.open_streams:  # a dead replica's streams outside any thread's lease: stopped, kept for a redo
            await self.settle_streams(TAKEN_OVER_NOTE)

    async def _drain(self, lane: _Lane) -> None:
        while lane.entries and lane.due <= time.monotonic():
            attempt = await self._send_head(lane, lane.entries[0])
            if attempt is None or attempt.result == "retry":
                return

    async def _send_head(self, lane: _Lane, entry: OutboxEntry) -> _Attempt | None:
        async with lane.lock:
            if not lane.entries or lane.entries[0] is not entry:
                return None
            if entry.expired(self.give_up_after):
                attempt = _Attempt("refused", error=f"not delivered in time (last: {entry.error or 'no answer'})")
            else:
                attempt = await self._claimed(entry) or await self._attempt(entry)
            if attempt.error == FENCED:
                lane.entries.popleft()
                return attempt
            if attempt.result == "retry":
                lane.failures += 1
                backoff = min(BACKOFF_CAP, BACKOFF_FIRST * 2 ** (lane.failures - 1))
                lane.due = time.monotonic() + max(backoff, attempt.wait)
                entry.error = attempt.error
                if lane.failures == 1:
                    log.warning(
                        "slack did not take a message; it stays in the outbox and is sent again",
                        extra={"call": _method(entry), "error": attempt.error, "channel": entry.channel},
                    )
                return attempt
            lane.entries.popleft()
            lane.failures, lane.due = 0, 0.0
            if attempt.result == "sent":
                self.sent += 1
                await self._mark(self.ledger.sent(entry.id))
            else:
                self.given_up += 1
                log.error(
                    "slack refused a message; given up",
                    extra={"call": _method(entry), "error": attempt.error, "channel": entry.channel},
                )
                await self._mark(self.ledger.give_up(entry.id, attempt.error or "refused"))
            return attempt

    async def _mark(self, write: Awaitable[None]) -> None:
        """Record an outcome; if the store is away, the next start finds the entry and looks for it first."""
        try:
            await write
        except (LedgerUnavailable, TimeoutError) as exc:
            log.warning("could not record that a Slack message was sent", extra={"error": str(exc)})

    async def _claimed(self, entry: OutboxEntry) -> _Attempt | None:
        """None when the store lets the entry go now. An entry whose writer lost its thread is left to the
        thread's new holder (this replica no longer sends it); one the store cannot answer for waits like
        any retry."""
        try:
            if await self.ledger.claim(entry.id):
                return None
        except (LedgerUnavailable, TimeoutError) as exc:
            return _Attempt("retry", error=f"store: {type(exc).__name__}")
        log.warning("left a message to the replica that took it or its thread over",
                    extra={"call": _method(entry), "channel": entry.channel})
        return _Attempt("refused", error=FENCED)

    async def _attempt(self, entry: OutboxEntry) -> _Attempt:
        try:
            if self.before_send is not None:
                await self.before_send()  # the run's writes are stored before anyone reads the message
        except (LedgerUnavailable, TimeoutError) as exc:
            return _Attempt("retry", error=f"store: {type(exc).__name__}")
        try:
            if entry.kind == "update":
                await self.client.chat_update(channel=entry.channel, ts=entry.target_ts, **entry.payload)
                return _Attempt("sent", ts=entry.target_ts)
            if entry.kind == "finish":
                return await self._finish(entry)
            if entry.maybe_sent and entry.thread_ts:
                found = await find_marked(self.client, entry)
                if found is not None:
                    return _Attempt("sent", ts=found)
            response = await self.client.chat_postMessage(
                channel=entry.channel, thread_ts=entry.thread_ts, unfurl_links=False, **entry.payload
            )
            return _Attempt("sent", ts=str(response["ts"]))
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            code = failure_code(exc)
            if not transient_failure(exc):
                return _Attempt("refused", error=code)
            if not isinstance(exc, SlackApiError) or getattr(exc.response, "status_code", 200) >= 500:
                entry.maybe_sent = True  # it may have been taken before the answer was lost
            return _Attempt("retry", error=code, wait=retry_after(exc))

    async def _finish(self, entry: OutboxEntry) -> _Attempt:
        """Stop the stream with the rest of its message, or, when its words were rewritten (`replace`) or Slack
        no longer takes the stream (expired, already stopped by an earlier attempt or process), edit the
        message to its whole text; then post the reply's further parts after it. A stream the person
        stopped stays as they stopped it."""
        rest = str(entry.payload.get("rest") or "")
        replace = bool(entry.payload.get("replace"))
        for ts, body in entry.payload.get("earlier") or []:  # a redo's whole reply begins in them
            await self.client.chat_update(channel=entry.channel, ts=ts, **body)
        try:
            await self.client.chat_stopStream(
                channel=entry.channel,
                ts=entry.target_ts or "",
                chunks=[{"type": "markdown_text", "text": rest}] if rest and not replace else None,
                blocks=None if replace else entry.payload.get("blocks") or None,
            )
        except SlackApiError as exc:
            code = failure_code(exc)
            if transient_failure(exc):
                raise
            if code == STOPPED_BY_USER:
                return _Attempt("sent", ts=entry.target_ts, error=code)
            replace = True
        if replace:
            await self.client.chat_update(channel=entry.channel, ts=entry.target_ts, **entry.payload["whole"])
        await self._post_more(entry)
        return _Attempt("sent", ts=entry.target_ts)

    async def _post_more(self, entry: OutboxEntry) -> None:
        """A long reply whose message was edited to its first part: the other parts go into the thread, each
        marked with its own id, so one that may be there already (a retry, a restart) is looked for first."""
        for index, payload in enumerate(entry.payload.get("more") or []):
            part = OutboxEntry(id=part_id(entry.id, index + 1), kind="post", channel=entry.channel,
                               thread_ts=entry.thread_ts, payload={}, created=entry.created)
            if entry.maybe_sent and await find_marked(self.client, part) is not None:
                continue
            entry.maybe_sent = True  # from here on, a retry looks before it posts
            await self.client.chat_postMessage(
                channel=entry.channel, thread_ts=entry.thread_ts, unfurl_links=False, **with_marker(part.id, payload)
            )


def _method(entry: OutboxEntry) -> str:
    return {"post": "chat.postMessage", "finish": "chat.stopStream"}.get(entry.kind, "chat.update")

