"""What the thread work reads about a thread: its record (the live one while a job works on it), the
channel binding it belongs to, whether its run is pumping here, and its run as stored now."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from crewagent.core.api.errors import CrewError
from crewagent.core.api.runs import Engine, RunManager, RunSnapshot

from ..base.actions import ButtonValue
from ..base.thread import ThreadKey, ThreadRecord
from .channel_binding import BindingRuntime
from .thread_worker import ThreadLanes
from .store import ThreadStore

if TYPE_CHECKING:
    from ..replicas.handover import Handover
    from ..replicas.threads import PostgresThreadStore


class ThreadState:
    def __init__(
        self,
        *,
        store: ThreadStore | PostgresThreadStore,
        lanes: ThreadLanes,
        bindings: dict[str, BindingRuntime],
        engine: Engine,
        runs: RunManager,
        handover: Handover | None,
    ) -> None:
        self.store = store
        self.lanes = lanes
        self.bindings = bindings
        self.engine = engine
        self.runs = runs
        self.handover = handover  # replicas: another replica may have moved a run on

    def binding(self, record: ThreadRecord) -> BindingRuntime:
        return self.bindings.get(record.binding) or self.bindings["default"]

    def live(self, key: ThreadKey) -> ThreadRecord | None:
        """The record the thread's running job works on (None when the thread's lane is idle)."""
        lane = self.lanes.lane(key)
        return lane.live if lane else None

    async def load(self, key: ThreadKey) -> ThreadRecord | None:
        return self.live(key) or await self.store.get(key)

    def pumping(self, record: ThreadRecord | None) -> bool:
        run_id = record.session.run_id if record else None
        return self.engine.is_pumping(run_id) if run_id else False

    async def snapshot(self, record: ThreadRecord, run_id: str) -> RunSnapshot | None:
        """The stored run as it is now (index entry + state file), read in one worker-thread hop."""
        binding = self.binding(record)

        def read() -> RunSnapshot | None:
            try:
                run = self.runs.get(run_id)
            except CrewError:
                return None
            package = binding.package(run.package_id)
            return self.runs.snapshot(run, package) if package is not None else None

        if self.handover is not None and not self.engine.is_pumping(run_id):
            run = await asyncio.to_thread(self.runs.store.read_record, run_id)
            if run is not None:
                await self.handover.refresh(record.key, run)  # another replica may have moved it on
        return await asyncio.to_thread(read)

    async def idle_run(self, key: ThreadKey) -> str | None:
        """The thread's current run, if this replica is not pumping it."""
        record = await self.store.get(key)
        run_id = record.session.run_id if record else None
        return run_id if run_id and not self.engine.is_pumping(run_id) else None

    def stop_local_runs(self) -> None:
        for run_id in self.engine.pumping_runs():
            self.engine.request_stop(run_id)


def pending_widget(record: ThreadRecord, value: ButtonValue) -> dict[str, Any] | None:
    """The open question a button or form answers, if it is still the thread's open question."""
    pending = record.session.pending_widget
    if pending is None or pending.widget_id != value.w:
        return None
    if value.r and pending.run_id and pending.run_id != value.r:
        return None
    return pending.payload
