"""A command's output kept within bounds: head and tail of each stream for the model, the whole log for the run."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

LOG_LIMIT_BYTES = 8 * 1024 * 1024  # the run keeps at most this much of one command's output
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


@dataclass
class StreamCapture:
    """The first and last `keep` bytes of a stream, and how many bytes it had."""

    keep: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.keep - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.keep:
                del self.tail[: len(self.tail) - self.keep]

    def render(self, budget: int) -> tuple[str, bool]:
        """Text of at most about `budget` bytes (head and tail), and whether anything was cut."""
        data = bytes(self.head + self.tail)
        if self.total <= budget and len(data) == self.total:
            whole = clean(data)
            if len(whole.encode()) <= budget:
                return whole, False
        half = max(budget // 2 - 64, 0)
        head = _fit(clean(bytes(self.head[:half])), half, keep_end=False)
        tail = _fit(clean(bytes((self.head + self.tail)[-half:])), half, keep_end=True) if half else ""
        cut = max(self.total - 2 * half, 0)
        return f"{head}\n… [about {cut} bytes cut; the whole log is kept with the run] …\n{tail}", True


@dataclass
class OutputCapture:
    """Both streams of one command, plus their interleaved log (bounded) and the last line seen."""

    limit: int  # output_limit_bytes: stdout and stderr together, as the model gets them
    stdout: StreamCapture = field(init=False)
    stderr: StreamCapture = field(init=False)
    log: bytearray = field(default_factory=bytearray)
    log_cut: int = 0
    last_line: str = ""

    def __post_init__(self) -> None:
        self.stdout = StreamCapture(self.limit)
        self.stderr = StreamCapture(self.limit)

    def add(self, stream: str, chunk: bytes) -> None:
        (self.stdout if stream == "stdout" else self.stderr).add(chunk)
        room = LOG_LIMIT_BYTES - len(self.log)
        self.log += chunk[: max(room, 0)]
        self.log_cut += max(len(chunk) - max(room, 0), 0)
        lines = [line for line in chunk.splitlines() if line.strip()]
        if lines:
            self.last_line = clean(lines[-1][-400:]).strip()[-200:]

    @property
    def total(self) -> int:
        return self.stdout.total + self.stderr.total

    def render(self) -> tuple[str, str, bool]:
        """(stdout, stderr, truncated) within `limit` bytes together; stderr gets at least a quarter."""
        err_budget = min(self.stderr.total, max(self.limit - self.stdout.total, self.limit // 4))
        out_budget = self.limit - err_budget
        out, cut_out = self.stdout.render(out_budget)
        err, cut_err = self.stderr.render(err_budget)
        return out, err, cut_out or cut_err

    def log_bytes(self) -> bytes:
        if not self.log_cut:
            return bytes(self.log)
        return bytes(self.log) + f"\n… [{self.log_cut} more bytes not kept] …\n".encode()


def clean(data: bytes) -> str:
    """Text a model and Slack can take: UTF-8 (bad bytes replaced), no terminal escapes or control bytes."""
    text = data.decode("utf-8", errors="replace")
    return _CONTROL.sub("\ufffd", _ANSI.sub("", text)) if ("\x1b" in text or _CONTROL.search(text)) else text


def _fit(text: str, limit: int, *, keep_end: bool) -> str:
    """At most `limit` UTF-8 bytes of `text` (bad bytes became 3-byte replacement characters)."""
    data = text.encode()
    if len(data) <= limit:
        return text
    part = data[-limit:] if keep_end else data[:limit]
    return part.decode("utf-8", errors="ignore")
