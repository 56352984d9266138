"""What replicas sharing one Postgres agree on, with nothing but Postgres: who drives which thread,
how many model calls run at once, and signals between them (a thread's queued events are in the
inbox, bot.inbox.database_inbox).

- A replica is live while its row's heartbeat is younger than the lease time; a thread of its own
  renews it every quarter of that (bot.replicas.heartbeat), however busy the event loop is. Nothing
  else expires: a lease held by a replica that stopped beating is free.
- A thread lease is a row naming its holder, taken and checked under the row lock (one statement
  sequence in a transaction), so two replicas can never both hold a live lease on a thread.
- NOTIFY tells the others that a thread has new events (`crew_inbox`), that a pumping run must be
  paused or stopped (`crew_control`), or that a model slot came free (`crew_slots`).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from crewagent.core.api.stores import connection_settings

from ..inbox.database_inbox import CONTROL_CHANNEL, INBOX_CHANNEL
from .heartbeat import CUT_OFF_SHARE, HeartbeatThread
from ..base.lease import Lease
from ..base.thread import ThreadKey

log = logging.getLogger(__name__)

SLOTS_CHANNEL = "crew_slots"

AWAY_RETRY_SECONDS = 1.0  # how often work that waits for the database tries again
P = ParamSpec("P")
T = TypeVar("T")


def waits_for_database(method: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Postgres work that waits while the database is away, instead of failing the turn that needs it:
    a run reaching it pauses there and goes on when the database is back (heartbeat logs the outage)."""

    @functools.wraps(method)
    async def patiently(*args: P.args, **kwargs: P.kwargs) -> T:
        while True:
            try:
                return await method(*args, **kwargs)
            except psycopg.OperationalError:  # connection refused or dropped, no connection in time
                await asyncio.sleep(AWAY_RETRY_SECONDS)  # nothing to wait on: the pool only fails fast

    return patiently


LISTEN_CONNECT_TIMEOUT = 10.0  # seconds the notification connection may take to open
LIVE_SQL = "EXISTS (SELECT 1 FROM crew_replicas r WHERE r.id = {col} AND r.heartbeat > now() - make_interval(secs => %(ttl)s))"


class Replicas:
    def __init__(
        self, pool: AsyncConnectionPool, url: str, *, lease_seconds: float, replica_id: str | None = None
    ) -> None:
        self.pool = pool
        self.url = url
        self.lease_seconds = lease_seconds
        self.id = replica_id or uuid.uuid4().hex[:12]
        self.last_beat = time.monotonic()
        self._tasks: list[asyncio.Task[None]] = []
        self._listener: AsyncConnection[Any] | None = None
        self.slot_freed = asyncio.Event()
        self._heartbeat: HeartbeatThread | None = None
        self._scan_task: asyncio.Task[None] | None = None
        # Cut off for a lease time, and not yet sure which of its threads others took over meanwhile
        # (set and cleared by bot.replicas.handover).
        self.taking_stock = False

    @property
    def beat_interval(self) -> float:
        """A quarter of the lease: three beats may be lost before the others take over."""
        return max(0.05, self.lease_seconds / 4)

    def sql_args(self, **more: Any) -> dict[str, Any]:
        return {"me": self.id, "ttl": self.lease_seconds, **more}

    # ---- life ---------------------------------------------------------------------

    async def start(
        self,
        *,
        on_inbox: Callable[[str], None],
        on_control: Callable[[dict[str, Any]], None],
        on_tick: Callable[[], Any],
        on_lost: Callable[[], None],
        on_back: Callable[[], None] | None = None,
    ) -> None:
        """Register as live, listen for signals, and beat (each beat then runs `on_tick`)."""
        async with self.pool.connection() as conn:
            await conn.execute("INSERT INTO crew_replicas (id) VALUES (%s)", (self.id,))
        self._listener = await self._connect_listener()
        self._tasks = [
            asyncio.create_task(self._listen(on_inbox, on_control), name="replica-listen"),
        ]
        self._start_heartbeat(on_tick, on_lost, on_back)

    async def stop(self) -> None:
        """Stop beating and give up every lease and slot at once, so other replicas take over now."""
        if self._heartbeat is not None:
            await asyncio.to_thread(self._heartbeat.stop)
            self._heartbeat = None
        if self._scan_task is not None:
            self._tasks.append(self._scan_task)
            self._scan_task = None
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        if self._listener is not None:
            await self._listener.close()
            self._listener = None
        try:
            async with self.pool.connection(timeout=5) as conn:
                await conn.execute("UPDATE crew_leases SET replica = NULL WHERE replica = %s", (self.id,))
                await conn.execute("UPDATE crew_model_slots SET replica = NULL, thread_key = NULL WHERE replica = %s",
                                   (self.id,))
                await conn.execute("DELETE FROM crew_replicas WHERE id = %s", (self.id,))
                await conn.execute("SELECT pg_notify(%s, '')", (SLOTS_CHANNEL,))
        except psycopg.Error:  # PoolTimeout included
            log.warning("could not hand back leases on shutdown; they expire after the lease time", exc_info=True)

    async def _connect_listener(self) -> AsyncConnection[Any]:
        conn = await AsyncConnection.connect(self.url, **connection_settings(LISTEN_CONNECT_TIMEOUT))
        for channel in (INBOX_CHANNEL, CONTROL_CHANNEL, SLOTS_CHANNEL):
            await conn.execute(f"LISTEN {channel}")
        return conn

    async def _listen(self, on_inbox: Callable[[str], None], on_control: Callable[[dict[str, Any]], None]) -> None:
        """Hand each notification on; reconnect when the connection drops (the periodic scan still
        finds queued work meanwhile; only pause/stop signals sent in the gap are missed)."""
        while True:
            conn = self._listener
            try:
                if conn is None or conn.closed:
                    conn = self._listener = await self._connect_listener()
                async for note in conn.notifies():
                    if note.channel == INBOX_CHANNEL:
                        on_inbox(note.payload)
                    elif note.channel == SLOTS_CHANNEL:
                        self.slot_freed.set()
                    elif note.channel == CONTROL_CHANNEL:
                        try:
                            on_control(json.loads(note.payload))
                        except ValueError:
                            continue
            except asyncio.CancelledError:
                raise
            except psycopg.Error:
                if self._listener is not None and not self.database_lost:
                    log.info("lost the notification connection to Postgres; reconnecting")
                if self._listener is not None:
                    await self._listener.close()
                    self._listener = None
                await asyncio.sleep(1.0)  # reconnecting: no event to wait on while the database is away

    @property
    def database_lost(self) -> bool:
        """The last heartbeat did not reach the database, or none got through for a while (`silent`)."""
        return self._heartbeat is not None and (self._heartbeat.failing or self.silent)

    @property
    def silent(self) -> bool:
        """No beat got through for CUT_OFF_SHARE of the lease time: judged by this replica's own clock,
        whatever its connections are doing (a frozen one answers nothing and raises nothing)."""
        return self._heartbeat is not None and time.monotonic() - self.last_beat > self.lease_seconds * CUT_OFF_SHARE

    @property
    def cut_off(self) -> bool:
        """What this replica's runs do must not reach Slack or the outbox now: its database is away or
        silent (judged before any other replica may take its threads over), or was away long enough that
        another replica may have taken some of its threads over and this one has not taken stock yet."""
        return self.database_lost or self.taking_stock

    def _start_heartbeat(
        self, on_tick: Callable[[], Any], on_lost: Callable[[], None], on_back: Callable[[], None] | None
    ) -> None:
        """Beat from a thread (see bot.replicas.heartbeat); after each beat the loop scans for orphaned
        threads, one scan at a time, so a slow scan never delays a beat."""

        def after_beat() -> None:
            if self._heartbeat is None:
                return  # stopping
            self.last_beat = self._heartbeat.last_beat  # here on the loop, after on_lost: never fresh too early
            if self._scan_task is None or self._scan_task.done():
                self._scan_task = asyncio.create_task(self._scan(on_tick), name="replica-scan")

        self._heartbeat = HeartbeatThread(
            self.url,
            self.id,
            interval=self.beat_interval,
            lease_seconds=self.lease_seconds,
            loop=asyncio.get_running_loop(),
            on_beat=after_beat,
            on_lost=on_lost,
            on_back=on_back,
        )
        self._heartbeat.start()

    @staticmethod
    async def _scan(on_tick: Callable[[], Any]) -> None:
        try:
            await on_tick()
        except psycopg.Error as exc:  # the database went away between the beat and the scan: next beat
            log.info("replica scan stopped: the database did not answer", extra={"error": type(exc).__name__})
        except Exception:
            log.exception("replica scan failed")

    # ---- thread leases ------------------------------------------------------------

    @waits_for_database
    async def acquire(
        self, key: ThreadKey, *, from_dead: Callable[[], bool] = lambda: True
    ) -> tuple[Lease | None, str | None]:
        """Take the thread's lease if it is free, ours, or its holder is dead and `from_dead()` allows
        taking from the dead now (asked at each try: a try may wait out an outage): (the lease held,
        previous holder); no lease when another replica holds it.

        The epoch grows unless we held the lease already or were its last holder (no one held it since),
        so whoever held it before is fenced off while our own work in flight keeps its epoch. The
        previous holder tells the caller whether its local copy of the thread's run is current.
        """
        async with self.pool.connection() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO crew_leases (thread_key, replica) VALUES (%(k)s, NULL) ON CONFLICT DO NOTHING",
                {"k": str(key)},
            )
            cur = await conn.execute(
                "SELECT replica IS NULL OR replica = %(me)s OR (%(dead)s AND NOT " + LIVE_SQL.format(col="replica") + "), "
                "last_holder "
                "FROM crew_leases WHERE thread_key = %(k)s FOR UPDATE",
                self.sql_args(k=str(key), dead=from_dead()),
            )
            row = await cur.fetchone()
            if row is None or not row[0]:
                return None, None
            cur = await conn.execute(
                "UPDATE crew_leases SET epoch = CASE WHEN replica = %(me)s OR (replica IS NULL AND last_holder = %(me)s) "
                "THEN epoch ELSE epoch + 1 END, "
                "replica = %(me)s, last_holder = %(me)s, acquired = now() WHERE thread_key = %(k)s RETURNING epoch",
                self.sql_args(k=str(key)),
            )
            held = await cur.fetchone()
            assert held is not None  # the row is locked above
            return Lease(str(key), int(held[0])), row[1]

    @waits_for_database
    async def release(self, key: ThreadKey) -> None:
        """Hand the thread's lease back; one the database does not take now expires after the lease time."""
        try:
            async with self.pool.connection() as conn:
                await conn.execute(
                    "UPDATE crew_leases SET replica = NULL WHERE thread_key = %s AND replica = %s", (str(key), self.id)
                )
        except psycopg.Error:  # PoolTimeout included
            log.warning("could not release a thread lease", extra={"slack_thread": str(key)}, exc_info=True)

    async def taken_from_me(self, keys: list[str]) -> set[str]:
        """Which of the threads this replica drives another replica holds now (after an outage)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT thread_key FROM crew_leases WHERE thread_key = ANY(%s) AND replica IS DISTINCT FROM %s",
                (keys, self.id),
            )
            return {row[0] for row in await cur.fetchall()}

    async def release_all_but(self, keys: list[str]) -> None:
        """Hand back every lease of ours but those of `keys` (threads this replica still drives)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "UPDATE crew_leases SET replica = NULL WHERE replica = %s AND NOT (thread_key = ANY(%s))", (self.id, keys)
            )

    async def orphans(self) -> list[str]:
        """Threads that need a driver and have none alive: waiting events, or a run left `running`."""
        live_lease = "EXISTS (SELECT 1 FROM crew_leases l WHERE l.thread_key = {key} AND " + LIVE_SQL.format(
            col="l.replica"
        ) + ")"
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT DISTINCT i.thread_key FROM crew_inbox i WHERE i.done_at IS NULL AND NOT "
                + live_lease.format(key="i.thread_key")
                + " UNION SELECT t.key FROM crew_threads t JOIN crew_runs r ON r.run_id = t.run_id "
                "WHERE r.phase = 'running' AND NOT " + live_lease.format(key="t.key"),
                self.sql_args(),
            )
            return [row[0] for row in await cur.fetchall()]

    async def forget_dead(self, after_seconds: float = 3600.0) -> None:
        """Drop rows of replicas gone for long (their leases are free already; this keeps the table small)."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "DELETE FROM crew_replicas WHERE heartbeat < now() - make_interval(secs => %s)", (after_seconds,)
            )
