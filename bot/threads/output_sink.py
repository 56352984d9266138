"""The one sink of a thread's session call: every output goes to the thread's renderer as it happens.

It also claims the event the call answers once an output made its effect durable (bot.threads.event_claim),
and keeps the thread's bookkeeping in step with the stream: the thread's link to a run is saved
the moment the run starts (so a crash mid-run can resume it), a switched model before the thread is told, and the phase watchers (the owner's Home tab)
hear when the run changes phase.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from crewagent.core.api.sessions import outputs

from ..base.thread import ThreadRecord
from .event_claim import EventClaim
from .renderer import ThreadRenderer
from .store import ThreadStore

if TYPE_CHECKING:
    from ..replicas.threads import PostgresThreadStore

PhaseWatcher = Callable[[ThreadRecord], None]


class OutputSink:

    def __init__(
        self,
        record: ThreadRecord,
        renderer: ThreadRenderer,
        store: ThreadStore | PostgresThreadStore,
        watchers: list[PhaseWatcher],
        claim: EventClaim | None = None,
    ) -> None:
        self.claim = claim  # the event's claim, settled once an output made its effect durable
        self.record = record
        self.renderer = renderer
        self.store = store
        self.watchers = watchers
        self.saved_run = record.session.run_id
        self.saved_model = record.session.model

    async def __call__(self, output: outputs.Output) -> None:
        if self.record.session.model != self.saved_model:  # a switched model is kept before the thread is told
            await self._save()
        await self.renderer.emit(output)
        if self.claim is not None and not (isinstance(output, outputs.ReplyDelta) and output.run_id is None):
            await self.claim.settle()  # a reply is recorded, or a run took the text: a redo would repeat it
        record = self.record
        if record.session.run_id != self.saved_run:
            # A run just started: its link (and the status message just drawn for it) is stored now, so a
            # crash mid-run can resume it in the same message.
            await self._save()
        if output.kind == "run_progress" and output.event.kind == "phase_changed":
            for watcher in self.watchers:
                watcher(record)

    async def _save(self) -> None:
        self.saved_run, self.saved_model = self.record.session.run_id, self.record.session.model
        await self.store.put(self.record)
