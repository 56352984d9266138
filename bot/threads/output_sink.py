"""The one sink of a thread's session call: every output goes to the thread's renderer as it happens.

It also claims the event the call answers once an output made its effect durable (bot.threads.event_claim),
and keeps the thread's bookkeeping in step with the stream: the thread record is saved the
moment the run starts or the conversation switches models, before the output saying so is shown, and the phase watchers (the owner's Home tab)
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
        self.saved = (record.session.run_id, record.session.model)

    async def __call__(self, output: outputs.Output) -> None:
        await self._save_if_changed()  # what the output tells the person (a model switched) is kept first
        await self.renderer.emit(output)
        if self.claim is not None and not (isinstance(output, outputs.ReplyDelta) and output.run_id is None):
            await self.claim.settle()  # a reply is recorded, or a run took the text: a redo would repeat it
        record = self.record
        await self._save_if_changed()
        if output.kind == "run_progress" and output.event.kind == "phase_changed":
            for watcher in self.watchers:
                watcher(record)

    async def _save_if_changed(self) -> None:
        """A run just started (store the thread's link to it now, so a crash mid-run can resume it), or the
        conversation switched models: the thread record is saved before anything else is shown."""
        session = self.record.session
        if (session.run_id, session.model) != self.saved:
            self.saved = (session.run_id, session.model)
            await self.store.put(self.record)
