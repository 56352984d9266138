"""Upkeep of the bot's projects and threads: opening the git checkouts, cleaning up old run worktrees,
settling the streamed replies a previous process left open, resuming the runs it left `running` (the
session call that resumes one is made here)."""

from __future__ import annotations

import asyncio
import logging
import time
from functools import partial
from collections.abc import Awaitable, Callable, Iterable
from typing import Protocol

from crewagent.core.api.errors import CrewError
from crewagent.core.api.runs import Engine, RunManager

from ..base.thread import ThreadKey, ThreadRecord
from ..outbox.courier import Courier
from ..render import blocks
from ..outgoing import Post
from ..slack_port import SlackPort
from .channel_binding import BindingRuntime
from .event_claim import Claims
from .thread_worker import ThreadLanes
from .session_calls import RunControl, ThreadCall

log = logging.getLogger(__name__)

TIDY_INTERVAL = 3600.0  # seconds between clean-ups of old run worktrees
RESTARTED_NOTE = "The bot restarted; resuming this run where it stopped."  # this process started again
TAKEN_OVER_NOTE = "Picking this run up where it stopped."  # from another replica: nothing need have restarted


class Records(Protocol):
    async def get(self, key: ThreadKey) -> ThreadRecord | None: ...

    async def all(self) -> Iterable[ThreadRecord]: ...


class Upkeep:
    def __init__(
        self,
        *,
        bindings: dict[str, BindingRuntime],
        runs: RunManager,
        engine: Engine,
        lanes: ThreadLanes,
        store: Records,
        io: SlackPort,
        resume_on_start: bool,
    ) -> None:
        self.bindings = bindings
        self.runs = runs
        self.engine = engine
        self.lanes = lanes
        self.store = store
        self.io = io
        self.resume_on_start = resume_on_start  # else a Resume button is offered
        self._tidied_at = 0.0

    async def open_checkouts(self) -> None:
        """Find out which projects are git repositories (cloning `repo:` URLs), then tidy old worktrees.
        A failure is logged and retried when a run needs the repository."""
        for binding in self.bindings.values():
            if binding.checkout is not None:
                try:
                    await binding.checkout.open()
                except CrewError as exc:
                    log.warning("project repository unavailable", extra={"binding": binding.name, "code": exc.code})
        await self.tidy_worktrees()

    async def tidy_worktrees(self) -> int:
        """Remove worktrees of runs completed longer ago than the retention time (work stays on the branch)."""
        self._tidied_at = time.monotonic()
        records = await asyncio.to_thread(self.runs.list)
        busy = frozenset(r.run_id for r in records if self.engine.is_pumping(r.run_id))
        removed = 0
        for binding in self.bindings.values():
            if binding.checkout is not None:
                try:
                    removed += await binding.checkout.prune(records, keep=busy)
                except CrewError as exc:
                    log.warning("worktree clean-up skipped", extra={"code": exc.code})
        return removed

    def maybe_tidy(self) -> None:
        """At most once per TIDY_INTERVAL, clean up old worktrees in the background."""
        if time.monotonic() - self._tidied_at >= TIDY_INTERVAL:
            self._tidied_at = time.monotonic()
            self.lanes.spawn(self._tidy(), name="tidy-worktrees")

    async def _tidy(self) -> None:
        await self.tidy_worktrees()

    async def settle_streams(self, outbox: Courier, claims: Claims) -> int:
        """Before new work: a reply an earlier process recorded whole is finished by the outbox, and the event
        it answered counts as handled (the model is not asked again); a stream it left open without its
        whole text is stopped and kept for the redo of what it answers (the resumed run, or the event
        handled again), which writes the whole reply into it. Returns how many streams were left open."""
        await claims.settle(outbox.settles_left())
        if cut := await outbox.settle_streams():
            log.info("settling streamed replies a previous process left open", extra={"count": cut})
        return cut

    async def take_outbox(self, key: ThreadKey, claims: Claims) -> None:
        """A thread this replica took over from another (bot.replicas.handover), before its work runs here:
        what the other recorded for it and did not send goes out from here (a reply recorded whole settles
        its event, which is not handled again), and a stream it left open is stopped and kept for the redo,
        which writes the whole reply into that message."""
        outbox = self.io.outbox
        if not isinstance(outbox, Courier):
            return
        cut = await outbox.take_thread(str(key))
        await claims.settle(outbox.settles_left())
        if cut:
            log.info("settling streamed replies another replica left open", extra={"count": cut, "slack_thread": str(key)})

    async def resume_interrupted(self, resume: Callable[[ThreadKey, str], Awaitable[None]]) -> int:
        """Runs left `running` by a previous process: `resume` each in its thread's lane. Returns how many."""
        interrupted = {r.run_id for r in await asyncio.to_thread(self.engine.interrupted_runs)}
        if not interrupted:
            return 0
        count = 0
        for record in await self.store.all():
            run_id = record.session.run_id
            if run_id not in interrupted:
                continue
            count += 1
            self.lanes.submit(record.key, partial(resume, record.key, run_id))
        return count

    async def resume_call(self, key: ThreadKey, run_id: str, *, taken_over: bool = False) -> ThreadCall | None:
        """The thread's run that a stopped process left `running`: the call that resumes it, or a Resume offer.

        `taken_over`: another replica drove it (it stopped, or was cut off from the database), so the
        note says the run is picked up rather than that this bot restarted."""
        record = await self.store.get(key)
        if record is None or record.session.run_id != run_id:
            return None
        if not self.resume_on_start:
            offer = blocks.resume_offer(key=str(key), run_id=run_id, taken_over=taken_over)
            await self.io.send(Post(key.channel, key.thread_ts, offer))
            return None
        notice = blocks.notice(TAKEN_OVER_NOTE if taken_over else RESTARTED_NOTE)
        await self.io.send(Post(key.channel, key.thread_ts, notice))
        return ThreadCall(record, RunControl("resume"), record.session.owner or "", budgeted=False)

