"""The run index: one small entry per run, which every listing reads (`crewagent runs`, /crew, the Home tab).

Two files in the runtime home, written under one lock (a thread lock in this process, flock across
processes sharing the home):

    runs-index.json       the index as of its last compaction (the format earlier releases wrote and
                          read: a home they made is read as it is, with no step to run)
    runs-index.journal    entries saved since, one JSON line each; a run's last line wins

A save appends one line, so its cost does not grow with the runs in the home: rewriting the whole
index at every save cost ~0.5 ms with 200 runs, on the event loop, and grew with every run kept.
Once the journal holds as many lines as the index has runs (at least COMPACT_AFTER), a save folds it
into runs-index.json and empties it: each save costs O(1) amortised, and the journal stays smaller
than the index. Another process catches up by reading only the lines appended since it last looked.

An earlier release reads runs-index.json only: what the journal holds is invisible to it (after a
downgrade, or running beside this one on the same home) until it is folded. So whatever holds the
index folds it when it stops cleanly (`fold`: the bot's serving process and every CLI command that
saves runs, through `RuntimeStore.close`), and `crewagent runs fold` does it on demand, after a
process was killed or while one runs. The fold is never on a save's path.

Crash safety (a process killed at any point; power loss is out of scope, as for every file here):
- an append is one write on an O_APPEND descriptor, in the OS once the call returns;
- runs-index.json is replaced by one rename; killed after it but before the journal is emptied,
  the journal's lines are replayed over an index that already holds them, to the same values;
- a journal line without its newline is a write that failed half-way, not a saved entry: readers
  ignore it and the next save cuts it off before appending.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from ..base.atomic import atomic_write_text
from ..base.errors import CrewError
from .runs_model import RunRecord

INDEX_FILE = "runs-index.json"
JOURNAL_FILE = "runs-index.journal"
COMPACT_AFTER = 256  # journal lines before a compaction, at the least
_ENTRY_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
_ENTRY_DECODER = json.JSONDecoder()
_INDEX_HEAD = '{"version": 1, "runs": [\n'
_INDEX_TAIL = "\n]}\n"
_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)

FileStat = tuple[int, int, int]  # inode, mtime, size
Signature = tuple[FileStat | None, FileStat | None, int, int]  # index, journal, saves, compactions


class RunIndex:
    """The index of one runtime home, cached in this process and re-read only as far as others changed it."""

    def __init__(self, home: str) -> None:
        self.path = os.path.join(home, INDEX_FILE)
        self.journal_path = os.path.join(home, JOURNAL_FILE)
        self._lock_path = os.path.join(home, f".{INDEX_FILE}.lock")
        self._lock = threading.Lock()
        self._items: dict[str, dict[str, Any]] = {}  # run id -> entry as stored
        self._texts: dict[str, str] = {}  # run id -> its JSON text, reused by the next compaction
        self._journal_end = 0  # where the journal's complete lines read so far end
        self._journal_lines = 0
        self._signature: Signature | None = None

    # ---- reading -------------------------------------------------------------------------------

    def records(self) -> dict[str, RunRecord]:
        with self._locked() as lock_fd:
            raw = dict(self._current(lock_fd))
        return RunRecord.valid_entries(raw)

    def record(self, run_id: str) -> RunRecord | None:
        """One run by id, validating only that entry (the index may hold thousands of runs)."""
        with self._locked() as lock_fd:
            item = self._current(lock_fd).get(run_id)
        if item is None:
            return None
        try:
            return RunRecord.model_validate(item)
        except ValidationError:
            return None

    def entries_of_sessions(self, session_ids: Collection[str]) -> dict[str, dict[str, Any]]:
        """The entries (as stored, not validated) of the runs these conversations started."""
        wanted = frozenset(session_ids)
        with self._locked() as lock_fd:
            raw = self._current(lock_fd)
            return {run_id: item for run_id, item in raw.items() if item.get("session_id") in wanted}

    # ---- writing -------------------------------------------------------------------------------

    def save(self, record: RunRecord) -> None:
        """Insert or replace one run's entry: one appended line, now and then a compaction."""
        with self._locked() as lock_fd:
            self._current(lock_fd)
            item = record.model_dump(mode="json")
            text = _ENTRY_JSON.encode(item)
            self._items[record.run_id], self._texts[record.run_id] = item, text
            compact = self._signature is None or self._signature[0] is None  # no runs-index.json yet
            compact = compact or self._journal_lines + 1 >= max(COMPACT_AFTER, len(self._items))
            try:
                self._compact(lock_fd) if compact else self._append(lock_fd, text)
            except OSError as exc:
                self._signature = None  # what is on disk is unknown: read it again next time
                raise CrewError(
                    "RUNS_INDEX_WRITE_FAILED",
                    f"Could not write the run index in the runtime home ({exc.strerror or type(exc).__name__}).",
                ) from None

    def fold(self) -> int:
        """Fold what the journal holds into runs-index.json, if anything; returns how many lines that was.

        For a clean stop and for operators: an earlier release reads runs-index.json only, so until the
        journal is folded it does not see the runs saved since (downgrading, or running beside this one).
        A home without a journal is left as it is: nothing is created in it, not even the lock file.
        """
        journal = _stat(self.journal_path)
        if journal is None or journal[2] == 0:
            return 0
        with self._locked() as lock_fd:
            self._current(lock_fd)
            assert self._signature is not None
            journal = self._signature[1]
            if journal is None or journal[2] == 0:
                return 0  # another process folded it meanwhile
            lines = self._journal_lines
            self._compact_or_raise(lock_fd)
        return lines

    def _compact_or_raise(self, lock_fd: int) -> None:
        try:
            self._compact(lock_fd)
        except OSError as exc:
            self._signature = None
            raise CrewError(
                "RUNS_INDEX_WRITE_FAILED",
                f"Could not write the run index in the runtime home ({exc.strerror or type(exc).__name__}).",
            ) from None

    def _append(self, lock_fd: int, text: str) -> None:
        assert self._signature is not None
        saves, compactions = _counters(lock_fd)
        _set_counters(lock_fd, saves + 1, compactions)  # before the file changes: a crash in between costs a re-read
        fd = os.open(self.journal_path, _APPEND_FLAGS, 0o644)
        try:
            if os.fstat(fd).st_size > self._journal_end:
                os.ftruncate(fd, self._journal_end)  # a line a failed write left without its newline
            view = memoryview((text + "\n").encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
            journal = _file_stat(os.fstat(fd))
        finally:
            os.close(fd)
        self._journal_end, self._journal_lines = journal[2], self._journal_lines + 1
        self._signature = (self._signature[0], journal, saves + 1, compactions)

    def _compact(self, lock_fd: int) -> None:
        saves, compactions = _counters(lock_fd)
        _set_counters(lock_fd, saves + 1, compactions + 1)
        atomic_write_text(self.path, _INDEX_HEAD + ",\n".join(self._texts.values()) + _INDEX_TAIL)
        if self._signature is not None and self._signature[1] is not None:
            os.truncate(self.journal_path, 0)  # after the rename: its lines are in the index now
        self._journal_end = self._journal_lines = 0
        self._signature = (_stat(self.path), _stat(self.journal_path), saves + 1, compactions + 1)

    # ---- the cache -----------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[int]:
        """Yields the lock file's descriptor, which also holds the counters of saves and compactions."""
        with self._lock:
            fd = os.open(self._lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield fd  # closing the descriptor releases the lock
            finally:
                os.close(fd)

    def _current(self, lock_fd: int) -> dict[str, dict[str, Any]]:
        """run id -> entry, brought up to date with what other writers did (lock held).

        File stats alone can repeat (ext4 hands a replaced file's inode to the next new one, and two
        quick writes may share an mtime); the counters every save bumps cannot.
        """
        signature = (_stat(self.path), _stat(self.journal_path), *_counters(lock_fd))
        if signature == self._signature:
            return self._items
        try:
            if self._only_appended(signature):
                self._read_journal(self._journal_end)
            else:
                self._read_all(signature)
        except (OSError, ValueError) as exc:
            self._signature = None
            raise CrewError(
                "RUNS_INDEX_READ_FAILED",
                f"The run index in the runtime home cannot be read ({type(exc).__name__}). "
                f"Move {INDEX_FILE} and {JOURNAL_FILE} aside to start a fresh index.",
            ) from None
        self._signature = signature
        return self._items

    def _only_appended(self, signature: Signature) -> bool:
        """Whether, since this process last looked, others only appended to the journal."""
        before = self._signature
        if before is None or signature[0] != before[0] or signature[3] != before[3] or signature[1] is None:
            return False
        same_journal = before[1] is None or before[1][0] == signature[1][0]
        return same_journal and signature[1][2] >= self._journal_end

    def _read_all(self, signature: Signature) -> None:
        entries = _index_entries(_read_text(self.path)) if signature[0] is not None else []
        kept = [(str(i["run_id"]), i, text) for i, text in entries if isinstance(i, dict) and i.get("run_id")]
        self._items = {run_id: item for run_id, item, _ in kept}
        self._texts = {run_id: text for run_id, _, text in kept}
        self._journal_end = self._journal_lines = 0
        if signature[1] is not None:
            self._read_journal(0)

    def _read_journal(self, start: int) -> None:
        with open(self.journal_path, "rb") as handle:
            handle.seek(start)
            data = handle.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line without its newline was never saved
        for line in complete.decode("utf-8").splitlines():
            item = _entry(line)
            if isinstance(item, dict) and item.get("run_id"):
                run_id = str(item["run_id"])
                self._items[run_id], self._texts[run_id] = item, line
        self._journal_end = start + len(complete)
        self._journal_lines += complete.count(b"\n")


def _index_entries(text: str) -> list[tuple[Any, str]]:
    """runs-index.json's runs, each with its JSON text (reused by the next compaction).

    The layout a compaction writes (one run per line) is parsed line by line, so the texts come for
    free; that checks exactly what parsing the whole file would. Any other layout is parsed whole,
    and its runs serialised again. Raises ValueError for text that is not the index's JSON.
    """
    if text.startswith(_INDEX_HEAD) and text.endswith(_INDEX_TAIL):
        lines = text[len(_INDEX_HEAD) : -len(_INDEX_TAIL)]
        try:
            return [(_entry(line), line) for line in lines.split(",\n")] if lines else []
        except ValueError:
            pass  # perhaps a hand edit that is still valid JSON as a whole
    raw = json.loads(text)
    items = raw.get("runs", []) if isinstance(raw, dict) else []
    return [(item, _ENTRY_JSON.encode(item) if isinstance(item, dict) else "") for item in items]


def _entry(line: str) -> Any:
    """One JSON value filling the whole line (raw_decode: json.loads costs more than the parse here)."""
    value, end = _ENTRY_DECODER.raw_decode(line)
    if end != len(line):
        raise ValueError("more than one JSON value on the line")
    return value


def _read_text(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _stat(path: str) -> FileStat | None:
    try:
        return _file_stat(os.stat(path))
    except FileNotFoundError:
        return None


def _file_stat(st: os.stat_result) -> FileStat:
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _counters(lock_fd: int) -> tuple[int, int]:
    """(saves, compactions) since the lock file was made; the first is the write generation of old releases."""
    data = os.pread(lock_fd, 16, 0).ljust(16, b"\0")
    return int.from_bytes(data[:8], "little"), int.from_bytes(data[8:], "little")


def _set_counters(lock_fd: int, saves: int, compactions: int) -> None:
    os.pwrite(lock_fd, saves.to_bytes(8, "little") + compactions.to_bytes(8, "little"), 0)
