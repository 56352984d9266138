"""A throwaway Postgres server for the test session: the system's postgres binaries, a temp data folder,
a loopback port, fsync off. Postgres refuses to run as root, so under root it runs as `nobody`.

One server per session; each test gets a fresh database (see conftest.py).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest

from tests.support.processes import free_port, kill_group

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

USER = "crew"


def find_bindir() -> Path | None:
    """Where initdb and postgres live: PATH, else Debian's /usr/lib/postgresql/<version>/bin."""
    on_path = shutil.which("initdb")
    if on_path and shutil.which("postgres"):
        return Path(on_path).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


@dataclass
class PostgresServer:
    bindir: Path
    root: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def admin_url(self) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql://{USER}@127.0.0.1:{self.port}/{database}"

    @staticmethod
    def _account() -> dict[str, int]:
        """Run as `nobody` when we are root (postgres refuses root)."""
        if os.geteuid() != 0:
            return {}
        nobody = pwd.getpwnam("nobody")
        return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}

    @classmethod
    def start(cls, bindir: Path, *, timeout: float = 60.0) -> PostgresServer:
        root = Path(tempfile.mkdtemp(prefix="crewagent-pg-"))
        account = cls._account()
        if account:
            os.chown(root, account["user"], account["group"])
        server = cls(bindir=bindir, root=root, port=free_port())
        subprocess.run(
            [str(bindir / "initdb"), "-D", str(root / "data"), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True, capture_output=True, timeout=timeout, **account,  # type: ignore[call-overload]
        )
        server._run(timeout)
        return server

    def _run(self, timeout: float) -> None:
        """Start the server process on the data folder and port it has, and wait until it answers."""
        log = open(self.root / "server.log", "ab")  # noqa: SIM115 - owned by the server process
        self.process = subprocess.Popen(
            [
                str(self.bindir / "postgres"), "-D", str(self.root / "data"), "-p", str(self.port), "-h", "127.0.0.1",
                "-k", str(self.root), "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                "-c", "max_connections=300", "-c", "shared_buffers=32MB",
            ],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, **self._account(),  # type: ignore[call-overload]
        )
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            try:
                with psycopg.connect(self.admin_url, connect_timeout=2):
                    return
            except psycopg.OperationalError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    output = (self.root / "server.log").read_text(errors="replace")[-2000:]
                    self.stop()
                    raise RuntimeError(f"postgres did not start:\n{output}") from None
                time.sleep(0.1)  # the server gives no other readiness signal

    def halt(self) -> None:
        """Stop the server at once (every connection drops), keeping its data for `resume`."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # fast shutdown: connections are cut, data kept
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                kill_group(self.process.pid)
                self.process.wait(10)

    def resume(self, timeout: float = 60.0) -> None:
        """Start the halted server again, on the same port with the same data."""
        self._run(timeout)

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGQUIT)  # immediate shutdown
                try:
                    self.process.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            kill_group(self.process.pid)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def running_server() -> Iterator[PostgresServer]:
    """A fixture's body: a server of its own, or the test skipped when no binaries are installed; the
    server ends with its process group, pass or fail."""
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL server binaries (initdb, postgres) are not installed; `.ci/run` installs them")
    server = PostgresServer.start(bindir)
    try:
        yield server
    finally:
        server.stop()


def conversation_lines(pool: "ConnectionPool", run_id: str) -> list[bytes]:
    """The lines of a run's conversation log as Postgres holds them, in order."""
    with pool.connection() as conn:
        rows = conn.execute(
            "SELECT line FROM crew_run_lines WHERE run_id = %s AND rel = 'conversation.jsonl' ORDER BY seq", (run_id,)
        ).fetchall()
    return [bytes(r[0]) for r in rows]
