"""The cap on concurrent model work across every replica: N slot rows, each held by one live replica.

Used like an asyncio.Semaphore (`async with slots:`). A slot whose holder stopped beating is free
again; a freed slot is announced with NOTIFY, and a waiter also retries on its own now and then.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from ..waits import wait_set
from .membership import LIVE_SQL, SLOTS_CHANNEL, Replicas, waits_for_database

RETRY_SECONDS = 1.0


class GlobalSlots:
    def __init__(self, replicas: Replicas, size: int) -> None:
        self.replicas = replicas
        self.size = size
        self._held: dict[asyncio.Task[object], int] = {}
        self._waiting = 0

    async def prepare(self) -> None:
        async with self.replicas.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO crew_model_slots (slot) SELECT generate_series(0, %s - 1) ON CONFLICT DO NOTHING",
                (self.size,),
            )

    def locked(self) -> bool:
        """A hint for the user ("queued"): someone here is already waiting for a slot."""
        return self._waiting > 0

    @waits_for_database
    async def _take(self) -> int | None:
        async with self.replicas.pool.connection() as conn:
            cur = await conn.execute(
                "UPDATE crew_model_slots SET replica = %(me)s WHERE slot = ("
                " SELECT slot FROM crew_model_slots WHERE slot < %(n)s AND (replica IS NULL OR NOT "
                + LIVE_SQL.format(col="replica")
                + ") ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING slot",
                self.replicas.sql_args(n=self.size),
            )
            row = await cur.fetchone()
        return int(row[0]) if row else None

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._waiting += 1
        try:
            while True:
                self.replicas.slot_freed.clear()
                slot = await self._take()
                if slot is not None:
                    self._held[task] = slot
                    return
                await wait_set(self.replicas.slot_freed, RETRY_SECONDS)
        finally:
            self._waiting -= 1

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        task = asyncio.current_task()
        slot = self._held.pop(task, None) if task is not None else None
        if slot is not None:
            await self._give_back(slot)

    @waits_for_database
    async def _give_back(self, slot: int) -> None:
        async with self.replicas.pool.connection() as conn:
            await conn.execute(
                "UPDATE crew_model_slots SET replica = NULL WHERE slot = %s AND replica = %s", (slot, self.replicas.id)
            )
            await conn.execute("SELECT pg_notify(%s, '')", (SLOTS_CHANNEL,))
