"""Posts one session call's outputs into its thread, keeping the thread's Slack bookkeeping up to date.

Outputs arrive live (through `emit`, while a run pumps) and as the call's return value; each
is rendered once. Run progress only redraws the status message; the end of the call redraws it
from the run's stored snapshot (so coalesced edits never leave a stale view) and posts the
completion or failure message when the run has just reached that phase.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from core.events import RunPhase
from core.outputs import (
    Clarify,
    Dismissed,
    ErrorOutput,
    Notice,
    Output,
    Reply,
    RunProgress,
    RunStarted,
    RunStatus,
    ShowAgents,
    ShowMenu,
    WidgetRequest,
)
from core.runs_model import RunSnapshot

from . import blocks
from .blocks import SlackMessage
from .slack_io import SlackIO
from .status import StatusBoard
from .threads import ThreadRecord
from .widgets import widget_messages

SnapshotSource = Callable[[ThreadRecord, str], Awaitable[RunSnapshot | None]]


class ThreadRenderer:
    def __init__(
        self,
        record: ThreadRecord,
        io: SlackIO,
        board: StatusBoard,
        snapshots: SnapshotSource,
        *,
        fresh_status: bool = False,
    ) -> None:
        self.record = record
        self.io = io
        self.board = board
        self.snapshots = snapshots
        self.fresh_status = fresh_status  # `*status`: post the status anew at the bottom of the thread
        self.phase_before = record.last_phase
        self.run_before = record.status_run_id
        self._seen: set[int] = set()
        self._errors: list[ErrorOutput] = []
        self.posted = 0
        self.completed_run: str | None = None  # the run whose completion this call posted
        self.completion_ts: str | None = None

    @property
    def key(self) -> str:
        return str(self.record.key)

    async def post(self, messages: list[SlackMessage]) -> None:
        for message in messages:
            await self.io.post(self.record.channel, self.record.thread_ts, message)
            self.posted += 1

    async def emit(self, output: Output) -> None:
        if id(output) in self._seen:
            return
        self._seen.add(id(output))
        record = self.record
        if isinstance(output, ShowAgents):
            record.epoch += 1
            await self.post(blocks.agent_picker(output.text, output.agents, key=self.key, epoch=record.epoch))
        elif isinstance(output, ShowMenu):
            record.epoch += 1
            await self.post(
                blocks.menu(
                    output.text,
                    output.items,
                    key=self.key,
                    epoch=record.epoch,
                    agent=output.agent,
                    footer="Pick an item, or type its number, its trigger or what you want.",
                )
            )
        elif isinstance(output, Clarify):
            record.epoch += 1
            await self.post(blocks.menu(output.text, output.candidates, key=self.key, epoch=record.epoch))
        elif isinstance(output, Reply):
            await self.post(blocks.reply(output.text, output.agent))
        elif isinstance(output, RunStarted):
            record.epoch += 1  # menus shown before the run are now out of date
            snapshot = output.snapshot
            if snapshot.phase == RunPhase.WAITING_USER and not snapshot.paused and snapshot.steps_done == 0:
                snapshot = snapshot.model_copy(update={"phase": RunPhase.RUNNING})  # created, about to pump
            if record.status_run_id == snapshot.run_id and record.status_ts:
                await self._redraw(snapshot, urgent=True)  # the same run, re-bound: still one status message
            else:
                await self._new_status(snapshot)
        elif isinstance(output, RunProgress):
            await self._progress(output)
        elif isinstance(output, RunStatus):
            if self.fresh_status or record.status_run_id != output.snapshot.run_id or not record.status_ts:
                await self._new_status(output.snapshot)
                self.fresh_status = False
            else:
                await self._redraw(output.snapshot, urgent=True)
        elif isinstance(output, WidgetRequest):
            await self.post(widget_messages(output.widget, key=self.key, run_id=output.run_id or record.session.run_id))
        elif isinstance(output, Notice):
            await self.post([blocks.notice(output.text, output.level)])
        elif isinstance(output, ErrorOutput):
            self._errors.append(output)  # posted by finish(), merged with a run failure if it is one
        elif isinstance(output, Dismissed):
            record.epoch += 1
            await self.post([blocks.notice(output.text)])

    async def _new_status(self, snapshot: RunSnapshot) -> None:
        record = self.record
        message = blocks.status(snapshot, key=self.key, working=True)
        ts = await self.board.post(record.channel, record.thread_ts, message)
        if ts is not None:
            record.status_ts = ts
            record.status_run_id = snapshot.run_id
            if self.run_before != snapshot.run_id:
                self.phase_before = None
                self.run_before = snapshot.run_id

    async def _progress(self, output: RunProgress) -> None:
        record = self.record
        if record.status_run_id != output.snapshot.run_id or not record.status_ts:
            await self._new_status(output.snapshot)
            return
        urgent = output.event.kind == "phase_changed"
        await self._redraw(output.snapshot, urgent=urgent)

    async def _redraw(self, snapshot: RunSnapshot, *, urgent: bool, queued: bool = False) -> None:
        record = self.record
        if not record.status_ts:
            return
        key = self.key

        def render() -> SlackMessage:
            return blocks.status(snapshot, key=key, queued=queued, working=True)

        self.board.schedule(record.channel, record.status_ts, render, urgent=urgent)

    async def show_queued(self) -> None:
        """The call waits for a free run slot: say so on the status message (or in the thread)."""
        record = self.record
        run_id = record.session.run_id
        snapshot = await self.snapshots(record, run_id) if run_id else None
        if snapshot is not None and record.status_ts and record.status_run_id == run_id:
            await self._redraw(snapshot, urgent=True, queued=True)
        else:
            await self.post([blocks.notice(":clock3: Queued — I'll start as soon as a run slot frees up.")])

    async def finish(self) -> None:
        """Redraw the status from the stored run; post errors, and completion / failure once per transition."""
        record = self.record
        errors, self._errors = self._errors, []
        run_id = record.session.run_id or record.status_run_id
        snapshot = await self.snapshots(record, run_id) if run_id else None
        if snapshot is None:
            await self.post([blocks.error(e.message) for e in errors])
            return
        if record.status_ts and record.status_run_id == run_id:
            key = self.key
            self.board.schedule(record.channel, record.status_ts, lambda: blocks.status(snapshot, key=key), urgent=True)
        before = self.phase_before if self.run_before == run_id else None
        outcome = _outcome(snapshot)
        failed_now = outcome == RunPhase.FAILED and before != RunPhase.FAILED
        failure_code = snapshot.error.code if failed_now and snapshot.error else None
        explained = next((e for e in errors if e.code == failure_code), None)
        await self.post([blocks.error(e.message) for e in errors if e is not explained])
        if outcome == RunPhase.COMPLETED and before != RunPhase.COMPLETED:
            message = blocks.completion(snapshot, key=self.key)
            self.completion_ts = await self.io.post(record.channel, record.thread_ts, message)
            self.posted += 1
            self.completed_run = run_id
        elif failed_now:
            await self.post([blocks.failure(snapshot, key=self.key, message=explained.message if explained else None)])
        record.last_phase = outcome


def _outcome(snapshot: RunSnapshot) -> RunPhase:
    """The phase that decides what the thread is told; a finished workflow stays "completed" while
    its post-completion chat waits on a question (the engine reports waiting-user then)."""
    if snapshot.phase == RunPhase.FAILED:
        return RunPhase.FAILED
    if snapshot.phase == RunPhase.COMPLETED or (snapshot.current_node_id is None and snapshot.steps_done > 0):
        return RunPhase.COMPLETED
    return snapshot.phase

