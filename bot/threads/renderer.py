"""The last step of a thread's work: one session call's outputs, drawn in its thread as they happen.

Outputs arrive once each, through `emit`, from the call's single output sink. Run progress only
redraws the status message; `finish` (the end of the call) redraws it from the run's stored snapshot
(so coalesced edits never leave a stale view) and posts the completion or failure message when the
run has just reached that phase.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from crewagent.core.api.events import RunPhase, engine_events
from crewagent.core.api.sessions import outputs
from crewagent.core.api.runs import RunSnapshot

from ..render import blocks, command_card
from ..native.agent_view import thread_title
from ..base.actions import ButtonValue
from ..render.message import SlackMessage
from ..native.fallbacks import PLAN
from ..render.plan import describe_tool, plan_status
from ..outgoing import Post
from ..slack_port import SlackPort
from ..slack_send import Priority
from ..status import StatusBoard
from ..native.stream import ReplyStream, ReplyTarget
from ..native.surface import AgentSurface
from ..base.thread import ThreadRecord
from ..render.widgets import widget_messages
from .event_claim import EventClaim

SnapshotSource = Callable[[ThreadRecord, str], Awaitable[RunSnapshot | None]]


class ThreadRenderer:
    """Draws one session call in one thread: replies (streamed when the surface can), menus, the run's status."""

    def __init__(
        self,
        record: ThreadRecord,
        io: SlackPort,
        board: StatusBoard,
        snapshots: SnapshotSource,
        *,
        fresh_status: bool = False,
        surface: AgentSurface | None = None,
        user: str | None = None,
        claim: EventClaim | None = None,
    ) -> None:
        self.record = record
        self.claim = claim  # the event the call answers: a streamed reply is recorded as answering it
        self.surface = surface
        self.user = user or record.session.owner  # whom a streamed reply is for
        self._stream: ReplyStream | None = None
        self._stream_turn: tuple[str | None, int] | None = None
        self._stream_current = False  # no tool ran since the open stream's last piece: a Reply now is its own
        self._streamed: list[str] = []  # replies already shown by finished streams
        self.io = io
        self.board = board
        self.snapshots = snapshots
        self.fresh_status = fresh_status  # `*status`: post the status anew at the bottom of the thread
        self.phase_before = record.last_phase
        self.run_before = record.status_run_id
        self._errors: list[outputs.ErrorOutput] = []
        self._note: str | None = None  # shown on the status while the model call is being retried
        self.posted = 0
        self.completed_run: str | None = None  # the run whose completion this call posted
        self.completion_ts: str | None = None
        self.dismissed = False  # the conversation was left: its agent session closes

    @property
    def key(self) -> str:
        return str(self.record.key)

    async def post(self, messages: list[SlackMessage]) -> None:
        for message in messages:
            await self.io.send(Post(self.record.channel, self.record.thread_ts, message))
            self.posted += 1
        if messages and self.surface is not None:
            self.surface.lines.replied(self.record.key)

    # ---- streamed replies ---------------------------------------------------------

    async def _piece(self, output: outputs.ReplyDelta) -> None:
        if self.surface is None:
            return  # shown whole when the Reply comes
        if output.restart:
            await self._cut_off_stream()
            return
        turn = (output.run_id, output.turn)
        if self._stream is not None and self._stream_turn != turn:
            await self._end_stream()
        if self._stream is None:
            self._stream = self.surface.reply_stream(self._target(output), output.run_id)
            self._stream_turn = turn
        started = self._stream.started
        self._stream_current = True
        await self._stream.add(output.text)
        if not started and self._stream.started:
            self.surface.lines.replied(self.record.key)

    def _target(self, output: outputs.ReplyDelta) -> ReplyTarget:
        """A run's reply answers the run (its resume writes it again); a conversation's answers the event,
        whose keys it settles when its whole text is recorded."""
        claim = self.claim
        if output.run_id:
            return ReplyTarget(self.record.key, self.user, output.agent, answers=f"run:{output.run_id}")
        if claim is None:
            return ReplyTarget(self.record.key, self.user, output.agent)
        return ReplyTarget(self.record.key, self.user, output.agent, answers=claim.answers, settles=claim.waiting)

    async def _end_stream(self, text: str | None = None) -> None:
        stream, self._stream, self._stream_turn = self._stream, None, None
        if stream is None:
            return
        if text is not None or stream.text:
            await stream.finish(text if text is not None else stream.text)
            self._streamed.append(stream.text.strip())
            self.posted += 1
            if self.surface is not None:
                self.surface.sessions.streamed(self.record.key)

    async def _cut_off_stream(self) -> None:
        """The streamed answer lost its connection and is asked for again: it is closed with a note and not
        remembered as a reply; the new answer gets a message of its own."""
        stream, self._stream, self._stream_turn = self._stream, None, None
        if stream is not None and await stream.cut_off():
            self.posted += 1

    async def _reply(self, output: outputs.Reply) -> None:
        """The whole text of a reply. One that follows its own stream's pieces ends that stream with it, also
        when it does not go on from the streamed words (the stream replaces them in its message); one that
        comes after a tool ran is a reply of its own, below the earlier turn's stream."""
        text = output.text.strip()
        stream = self._stream
        if stream is not None and (self._stream_current or text.startswith(stream.text[: stream.sent].strip())):
            await self._end_stream(output.text)
            return
        await self._end_stream()
        if text in self._streamed:
            return  # a conversation's last answer, already streamed as its turn was written
        await self.post(blocks.reply(output.text, output.agent))

    # ---- the run's plan and the status line ---------------------------------------

    def _status_message(
        self, snapshot: RunSnapshot, *, queued: bool = False, working: bool = False, note: str | None = None
    ) -> SlackMessage:
        surface = self.surface
        if surface is not None and surface.fallbacks.allows(self.key, PLAN):
            source = surface.plan_source(self.record, snapshot)
            if source is not None:
                graph, agent_name = source
                details = surface.plans.details(snapshot.run_id)
                return plan_status(snapshot, graph, agent_name, details, key=self.key, queued=queued)
        return blocks.status(snapshot, key=self.key, queued=queued, working=working, note=note)

    def _note_activity(self, output: outputs.RunProgress) -> None:
        surface, event = self.surface, output.event
        if surface is None:
            return
        key = self.record.key
        if isinstance(event, engine_events.ToolExecuted):
            line = describe_tool(event.summary)
            if line:
                surface.plans.note(event.run_id, output.snapshot.current_node_id, line)
                surface.lines.working(key, line)
        elif isinstance(event, engine_events.CommandProgress):
            node = output.snapshot.current_node_id
            surface.plans.note(event.run_id, node, command_card.plan_line(event), replacing=command_card.plan_key(event))
            if event.running:
                surface.lines.working(key, command_card.status_line(event))
        elif isinstance(event, engine_events.NodeStarted):
            surface.lines.working(key, f"Working on {event.title}")
        elif isinstance(event, engine_events.LLMRetrying):
            surface.lines.working(key, engine_events.retry_note(event))

    async def emit(self, output: outputs.Output) -> None:
        """Draw one output of the call, as it happens."""
        if isinstance(output, outputs.ReplyDelta):
            await self._piece(output)
            return
        record = self.record
        if not isinstance(output, (outputs.Reply, outputs.RunProgress)):
            await self._end_stream()
        if isinstance(output, outputs.ShowAgents):
            record.epoch += 1
            await self.post(blocks.agent_picker(output.text, output.agents, key=self.key, epoch=record.epoch))
        elif isinstance(output, outputs.ShowMenu):
            await self._menu(output)
        elif isinstance(output, outputs.Clarify):
            record.epoch += 1
            await self.post(blocks.menu(output.text, output.candidates, key=self.key, epoch=record.epoch))
        elif isinstance(output, outputs.Reply):
            await self._reply(output)
        elif isinstance(output, outputs.RunStarted):
            await self._run_started(output.snapshot)
        elif isinstance(output, outputs.RunProgress):
            self._stream_current = False
            await self._progress(output)
        elif isinstance(output, outputs.RunStatus):
            await self._run_status(output.snapshot)
        elif isinstance(output, outputs.WidgetRequest):
            await self.post(widget_messages(output.widget, key=self.key, run_id=output.run_id or record.session.run_id))
        elif isinstance(output, outputs.Notice):
            await self.post([blocks.notice(output.text, output.level)])
        elif isinstance(output, outputs.ErrorOutput):
            self._errors.append(output)  # posted by finish(), merged with a run failure if it is one
        elif isinstance(output, outputs.Dismissed):
            self.dismissed = True
            record.epoch += 1
            await self.post([blocks.notice(output.text)])

    async def _menu(self, output: outputs.ShowMenu) -> None:
        record = self.record
        record.epoch += 1
        footer = "Pick an item, or type its number, its trigger or what you want."
        await self.post(
            blocks.menu(output.text, output.items, key=self.key, epoch=record.epoch, agent=output.agent, footer=footer)
        )
        if self.surface is not None and not record.session.run_id:
            await self.surface.set_title(record.key, thread_title(f"{output.agent.icon} {output.agent.name}"))

    async def _run_started(self, snapshot: RunSnapshot) -> None:
        record = self.record
        record.epoch += 1  # menus shown before the run are now out of date
        if snapshot.phase == RunPhase.WAITING_USER and not snapshot.paused and snapshot.steps_done == 0:
            snapshot = snapshot.model_copy(update={"phase": RunPhase.RUNNING})  # created, about to pump
        if record.status_run_id == snapshot.run_id and record.status_ts:
            await self._redraw(snapshot, *_weight(snapshot))  # the same run, re-bound: still one status message
        else:
            await self._new_status(snapshot)
        if self.surface is not None:
            title = thread_title(snapshot.agent_name, snapshot.workflow_name)
            await self.surface.set_title(record.key, title)
            self.surface.sessions.rename(record.key, title)

    async def _run_status(self, snapshot: RunSnapshot) -> None:
        record = self.record
        if self.fresh_status or record.status_run_id != snapshot.run_id or not record.status_ts:
            await self._new_status(snapshot)
            self.fresh_status = False
        else:
            await self._redraw(snapshot, Priority.URGENT, _weight(snapshot)[1])  # asked for

    def _error(self, error: outputs.ErrorOutput) -> SlackMessage:
        retry = ButtonValue(s=self.key, x="retry") if error.retry else None
        return blocks.error(error.message, retry=retry)

    async def _new_status(self, snapshot: RunSnapshot) -> None:
        record = self.record
        message = self._status_message(snapshot, working=True)
        ts = await self.board.post(record.channel, record.thread_ts, message)
        if ts is None and self.surface is not None and self.surface.fallbacks.allows(self.key, PLAN):
            if self.surface.fallbacks.fall_back(self.key, PLAN, self.board.last_failure or "plan message refused"):
                ts = await self.board.post(record.channel, record.thread_ts, self._status_message(snapshot, working=True))
        if ts is not None:
            record.status_ts = ts
            record.status_run_id = snapshot.run_id
            if self.run_before != snapshot.run_id:
                self.phase_before = None
                self.run_before = snapshot.run_id

    async def _progress(self, output: outputs.RunProgress) -> None:
        self._note_activity(output)
        if isinstance(output.event, engine_events.CommandProgress) and not output.event.running:
            await self.post([command_card.result_message(output.event, key=self.key)])
        record = self.record
        if record.status_run_id != output.snapshot.run_id or not record.status_ts:
            await self._new_status(output.snapshot)
            return
        retrying = isinstance(output.event, engine_events.LLMRetrying)
        self._note = engine_events.retry_note(output.event) if isinstance(output.event, engine_events.LLMRetrying) else None
        if retrying or output.event.kind == "phase_changed":
            await self._redraw(output.snapshot, *_weight(output.snapshot))
        else:
            await self._redraw(output.snapshot, Priority.BACKGROUND)  # progress: coalesced with what is left

    async def _redraw(
        self, snapshot: RunSnapshot, priority: Priority, milestone: str | None = None, *, queued: bool = False
    ) -> None:
        record = self.record
        if not record.status_ts:
            return
        note = self._note

        def render() -> SlackMessage:
            return self._status_message(snapshot, queued=queued, working=True, note=note)

        self.board.schedule(record.channel, record.status_ts, render, priority=priority, milestone=milestone)

    async def show_queued(self) -> None:
        """The call waits for a free run slot: say so on the status message (or in the thread)."""
        record = self.record
        run_id = record.session.run_id
        snapshot = await self.snapshots(record, run_id) if run_id else None
        if self.surface is not None:
            self.surface.lines.working(record.key, "Queued: waiting for a free run slot")
        if snapshot is not None and record.status_ts and record.status_run_id == run_id:
            await self._redraw(snapshot, *_weight(snapshot), queued=True)
        else:
            await self.post([blocks.notice(":clock3: Queued — I'll start as soon as a run slot frees up.")])

    async def finish(self) -> None:
        """Redraw the status from the stored run; post errors, and completion / failure once per transition."""
        record = self.record
        await self._end_stream()
        errors, self._errors = self._errors, []
        run_id = record.session.run_id or record.status_run_id
        snapshot = await self.snapshots(record, run_id) if run_id else None
        if snapshot is None:
            await self.post([self._error(e) for e in errors])
            return
        if record.status_ts and record.status_run_id == run_id:
            priority, milestone = _weight(snapshot)
            self.board.schedule(
                record.channel, record.status_ts, lambda: self._status_message(snapshot), priority=priority, milestone=milestone
            )
        before = self.phase_before if self.run_before == run_id else None
        outcome = _outcome(snapshot)
        failed_now = outcome == RunPhase.FAILED and before != RunPhase.FAILED
        failure_code = snapshot.error.code if failed_now and snapshot.error else None
        explained = next((e for e in errors if e.code == failure_code), None)
        await self.post([self._error(e) for e in errors if e is not explained])
        if outcome == RunPhase.COMPLETED and before != RunPhase.COMPLETED:
            message = blocks.completion(snapshot, key=self.key)
            self.completion_ts = (await self.io.send(Post(record.channel, record.thread_ts, message))).ts
            self.posted += 1
            if self.surface is not None and self.completion_ts:
                self.surface.lines.replied(record.key)  # the post cleared the status line
            self.completed_run = run_id
        elif failed_now:
            await self.post([blocks.failure(snapshot, key=self.key, message=explained.message if explained else None)])
        record.last_phase = outcome


def _weight(snapshot: RunSnapshot) -> tuple[Priority, str | None]:
    """How soon a drawing of the run must be shown, and the phase it must not be replaced before it is:
    an outcome or a pause is what the person reads; routine phases (running, waiting) only go before progress."""
    outcome = _outcome(snapshot)
    if outcome in (RunPhase.COMPLETED, RunPhase.FAILED):
        return Priority.URGENT, outcome.value
    if snapshot.paused:
        return Priority.URGENT, "paused"
    return Priority.LIVE, None


def _outcome(snapshot: RunSnapshot) -> RunPhase:
    """The phase that decides what the thread is told; a finished workflow stays "completed" while
    its post-completion chat waits on a question (the engine reports waiting-user then)."""
    if snapshot.phase == RunPhase.FAILED:
        return RunPhase.FAILED
    if snapshot.phase == RunPhase.COMPLETED or (snapshot.current_node_id is None and snapshot.steps_done > 0):
        return RunPhase.COMPLETED
    return snapshot.phase

