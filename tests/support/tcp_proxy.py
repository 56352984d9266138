"""A loopback TCP proxy that can cut one client off from a server, as a network partition would.

The replicas under test are separate processes: point one of them at the proxy and the other straight
at the server, and `cut()` takes the first one's database away while the second keeps it. A cut
closes every open connection at once (the client sees them drop, as it does when a partition is
noticed) and closes each new one as soon as it is accepted, until `restore()`. A freeze is the silent
kind: `freeze()` stops forwarding in both directions and closes nothing (new connections are accepted
and left as silent), as when packets are lost with no reset; `thaw()` forwards again what waited.

Stdlib only; it forwards from a thread of its own (a selector loop), so it keeps working whatever
the test's event loop is doing. `close()` ends the thread and every socket, pass or fail (use it as
a context manager).
"""

from __future__ import annotations

import selectors
import socket
import struct
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Self

CHUNK = 64 * 1024
COMMAND_TIMEOUT = 10.0  # seconds the proxy thread may take to carry out cut/restore/close


@dataclass
class _Pair:
    """One client connection and its connection to the server; bytes one side sent that the other has not taken yet."""

    client: socket.socket
    server: socket.socket
    to_server: bytearray = field(default_factory=bytearray)
    to_client: bytearray = field(default_factory=bytearray)


def _reset(sock: socket.socket) -> None:
    """Close at once, with a reset rather than an orderly end (nothing lingers in TIME_WAIT)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


class TcpProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self.accepted = 0  # connections let through
        self.refused = 0  # connections closed at once because the proxy was cut
        self._cut = False
        self._frozen = False
        self._pairs: list[_Pair] = []
        self._selector = selectors.DefaultSelector()
        self._wake_read, self._wake_write = socket.socketpair()
        self._wake_read.setblocking(False)
        self._commands: list[tuple[str, threading.Event]] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="tcp-proxy", daemon=True)
        self._closed = False

    def url_for(self, database_url: str) -> str:
        """`database_url` (postgresql://user@host:port/db) with host and port replaced by the proxy's."""
        scheme, rest = database_url.split("://", 1)
        user, _, location = rest.rpartition("@")
        path = location.split("/", 1)[1] if "/" in location else ""
        return f"{scheme}://{user + '@' if user else ''}127.0.0.1:{self.port}/{path}"

    # ---- control, from any thread -------------------------------------------------------

    def start(self) -> Self:
        self._selector.register(self._listener, selectors.EVENT_READ, "listen")
        self._selector.register(self._wake_read, selectors.EVENT_READ, "wake")
        self._thread.start()
        return self

    def cut(self) -> None:
        """Drop every open connection and close each new one at once, until `restore`."""
        self._command("cut")

    def restore(self) -> None:
        """Let connections through again (those dropped by the cut stay closed: clients reconnect)."""
        self._command("restore")

    def freeze(self) -> None:
        """Forward nothing either way, and close nothing, until `thaw`: the clients hear silence."""
        self._command("freeze")

    def thaw(self) -> None:
        """Forward again, what waited first."""
        self._command("thaw")

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        """End the thread and close every socket; safe to call twice, and after a failed start."""
        if self._closed:
            return
        self._closed = True
        if self._thread.is_alive():
            self._command("close")
            self._thread.join(COMMAND_TIMEOUT)
        for pair in self._pairs:
            _reset(pair.client)
            _reset(pair.server)
        self._pairs.clear()
        self._selector.close()
        self._listener.close()
        self._wake_read.close()
        self._wake_write.close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def _command(self, name: str) -> None:
        done = threading.Event()
        with self._lock:
            self._commands.append((name, done))
        self._wake_write.send(b"x")
        if not done.wait(COMMAND_TIMEOUT):
            raise AssertionError(f"the TCP proxy did not {name} within {COMMAND_TIMEOUT} s")

    # ---- the proxy thread ---------------------------------------------------------------

    def _run(self) -> None:
        while True:
            for key, mask in self._selector.select():
                if key.data == "wake":
                    if not self._carry_out():
                        return
                elif key.data == "listen":
                    self._accept()
                else:
                    self._pump(key.data, key.fileobj, mask)  # type: ignore[arg-type]

    def _carry_out(self) -> bool:
        """Run the commands sent; False once told to close."""
        try:
            self._wake_read.recv(1024)
        except BlockingIOError:
            pass
        with self._lock:
            commands, self._commands = self._commands, []
        keep_going = True
        for name, done in commands:
            if name == "cut":
                self._cut = True
                for pair in list(self._pairs):
                    self._drop(pair)
            elif name == "restore":
                self._cut = False
            elif name == "freeze":
                self._frozen = True
                for pair in list(self._pairs):
                    for sock in (pair.client, pair.server):
                        self._selector.unregister(sock)
            elif name == "thaw":
                self._frozen = False
                for pair in list(self._pairs):
                    self._listen_to(pair)
            else:
                keep_going = False
            done.set()
        return keep_going

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if self._cut:
            self.refused += 1
            _reset(client)
            return
        try:
            server = socket.create_connection(self.target, timeout=COMMAND_TIMEOUT)
        except OSError:
            _reset(client)
            return
        client.setblocking(False)
        server.setblocking(False)
        pair = _Pair(client, server)
        with self._lock:
            self._pairs.append(pair)
        self.accepted += 1
        if not self._frozen:
            self._listen_to(pair)

    def _listen_to(self, pair: _Pair) -> None:
        for sock in (pair.client, pair.server):
            self._selector.register(sock, selectors.EVENT_READ, pair)
        self._watch(pair)

    def _pump(self, pair: _Pair, sock: socket.socket, mask: int) -> None:
        """Move bytes one hop; a side that ends or fails ends the pair (as the real peer would see it)."""
        from_client = sock is pair.client
        other = pair.server if from_client else pair.client
        backlog = pair.to_server if from_client else pair.to_client  # what `sock` sent, waiting for `other`
        inbound = pair.to_client if from_client else pair.to_server  # what waits to be written to `sock`
        try:
            if mask & selectors.EVENT_WRITE and inbound:
                sent = sock.send(inbound)
                del inbound[:sent]
            if mask & selectors.EVENT_READ:
                data = sock.recv(CHUNK)
                if not data:
                    self._drop(pair)
                    return
                backlog += data
                sent = other.send(backlog) if backlog else 0
                del backlog[:sent]
        except BlockingIOError:
            pass
        except OSError:
            self._drop(pair)
            return
        self._watch(pair)

    def _watch(self, pair: _Pair) -> None:
        """Wait for writability only on a side with bytes waiting for it."""
        for sock, waiting in ((pair.client, pair.to_client), (pair.server, pair.to_server)):
            events = selectors.EVENT_READ | (selectors.EVENT_WRITE if waiting else 0)
            self._selector.modify(sock, events, pair)

    def _drop(self, pair: _Pair) -> None:
        with self._lock:
            if pair not in self._pairs:
                return
            self._pairs.remove(pair)
        for sock in (pair.client, pair.server):
            try:
                self._selector.unregister(sock)
            except (KeyError, ValueError):
                pass
            _reset(sock)
