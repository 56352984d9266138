"""This replica's heartbeat, renewed from a thread of its own over a Postgres connection of its own.

Other replicas take a thread over once its holder's heartbeat is older than the lease time, so a
beat that comes late hands live runs to someone else. Beating on the event loop made liveness depend
on how busy the loop is: with hundreds of runs a turn's work could delay a beat past a short lease.
A thread blocked in a socket call does not hold the GIL, and the loop thread gives the GIL up every
few milliseconds, so this thread beats on time however busy the loop is; it dies with the process,
so a killed replica stops beating at once.

A replica judges its own lease by its own clock. Others take its threads over once its heartbeat row is a
lease time old; it counts itself cut off once its last beat that got through (timed from when that beat
was sent, so never later than the row says) is CUT_OFF_SHARE of that old, so it stops acting before anyone
may take over. A frozen connection (no reset, nothing answers) would hold a beat for ever: each beat has a
deadline of its own, after which its socket is shut, and the connection settings end a silent one within
about 15 s on the wire.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg

from crewagent.core.api.stores import connection_settings

log = logging.getLogger(__name__)

# Share of the lease time without a beat after which this replica counts itself cut off: others wait a
# whole lease time, so half leaves the other half for this replica to stop before they take over.
CUT_OFF_SHARE = 0.5


class HeartbeatThread:
    """Renews `crew_replicas.heartbeat` every `interval` seconds; tells the loop after each beat
    (`on_beat`), once when no beat got through for CUT_OFF_SHARE of `lease_seconds` (`on_lost`), and
    once when beats get through again after that (`on_back`). An outage is logged once when it starts and once when
    it ends, however long it lasts."""

    def __init__(
        self,
        url: str,
        replica_id: str,
        *,
        interval: float,
        lease_seconds: float,
        loop: asyncio.AbstractEventLoop,
        on_beat: Callable[[], None],
        on_lost: Callable[[], None],
        on_back: Callable[[], None] | None = None,
    ) -> None:
        self.url = url
        self.replica_id = replica_id
        self.interval = interval
        self.lease_seconds = lease_seconds
        self.loop = loop
        self.on_beat = on_beat
        self.on_lost = on_lost
        self.on_back = on_back
        self.last_beat = time.monotonic()
        self.beats = 0
        self.failing = False  # the last beat did not get through
        self.lost = False  # no beat for a whole lease time: others may have taken our threads
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replica-heartbeat", daemon=True)
        self._conn: Any = None
        self._since = time.monotonic()  # the last beat that got through, for the log

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Blocking: call it from a worker thread (asyncio.to_thread) on the loop."""
        self._stopping.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while not self._stopping.wait(self.interval):
                self._beat_once()
        finally:
            self._close()

    @property
    def deadline(self) -> float:
        """Seconds a beat may take before it counts as failed: two beat intervals (a quarter of the lease each)."""
        return max(0.1, self.interval * 2)

    def _beat_once(self) -> None:
        sent = time.monotonic()
        try:
            self._renew()
        except psycopg.Error as exc:
            self._close()
            if not self.failing:
                self.failing = True
                log.error("lost contact with the database; new work waits until it is back",
                          extra={"error": str(exc).splitlines()[0] if str(exc) else type(exc).__name__})
            if not self.lost and time.monotonic() - self.last_beat > self.lease_seconds * CUT_OFF_SHARE:
                self.lost = True
                self._tell(self.on_lost)  # stop acting for our threads: others may take them over soon
            return
        gap = time.monotonic() - self.last_beat
        if not self.lost and gap > self.lease_seconds - self.interval:
            # A beat this late (a frozen connection that healed, a stalled process): others may have judged
            # us dead meanwhile, so take stock as after an outage.
            self.lost = True
            self._tell(self.on_lost)
        self.last_beat = sent
        self.beats += 1
        if self.failing:
            log.warning("the database is reachable again", extra={"seconds": round(time.monotonic() - self._since, 1)})
            self.failing = False
        if self.lost and self.on_back is not None:
            self._tell(self.on_back)
        self.lost = False
        self._since = time.monotonic()
        self._tell(self.on_beat)

    def _renew(self) -> None:
        """One beat, given up after `deadline`: a connection whose peer went silent would otherwise hold
        it in a socket read for ever (statement_timeout is the server's, and the server hears nothing)."""
        conn = self._connection()
        timer = threading.Timer(self.deadline, _shut, (conn.pgconn.socket,))
        timer.start()
        try:
            cur = conn.execute("UPDATE crew_replicas SET heartbeat = now() WHERE id = %s", (self.replica_id,))
            if cur.rowcount == 0:  # our row was dropped (forget_dead after a long outage): join again
                conn.execute("INSERT INTO crew_replicas (id) VALUES (%s) ON CONFLICT DO NOTHING", (self.replica_id,))
        finally:
            timer.cancel()

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            timeout_ms = max(100, int(self.deadline * 1000))  # a stuck statement must not hold beats back
            self._conn = psycopg.connect(
                self.url, **connection_settings(self.deadline, options=f"-c statement_timeout={timeout_ms}")
            )
        return self._conn

    def _close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:
                pass  # a connection to a database that went away: nothing left to close
            self._conn = None

    def _tell(self, callback: Callable[[], None]) -> None:
        try:
            self.loop.call_soon_threadsafe(callback)
        except RuntimeError:  # the loop closed under us: the process is ending
            self._stopping.set()


def _shut(fd: int) -> None:
    """End a beat that overran its deadline: shutting the socket down wakes the read it waits in, which
    then fails (the connection is closed and opened again at the next beat)."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return  # closed meanwhile: the beat is over
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected any more: nothing to wake
    finally:
        sock.close()
