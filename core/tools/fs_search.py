"""fs_search: a Python scan for files and small trees, ripgrep for big trees; same results.

Starting ripgrep costs a few milliseconds, far more than scanning a step's worth of Markdown, so
a search whose files are few and small (found by a bounded walk) runs in-process, in a worker
thread. Bigger trees go to ripgrep when it is installed, else to the same Python walk in a thread.
Both skip dot entries, `.git`, `node_modules`, symlinks, binary files and what is off limits to
agents (the config file, the runtime home: off_limits.py), and report one match per matching line
with its context lines.

The pattern comes from the model, which is untrusted: regexes run on RE2, whose matching time is
linear in the input (no catastrophic backtracking) and whose syntax is that of ripgrep's engine,
so both paths accept the same patterns. Every search also has a deadline: the walk checks it
between lines and ripgrep is killed when it passes; the model then gets an error value.
"""

from __future__ import annotations

import asyncio
import base64
import fnmatch
import itertools
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


from ..base.errors import CrewError
from .mounts import Resolved, alias_of, resolve
from .args import SearchArgs
from .base import ToolContext, ToolOutcome, fail, ok

MAX_LINE_CHARS = 400
SMALL_SEARCH_FILES = 64  # a search over at most this many files ...
SMALL_SEARCH_BYTES = 1_048_576  # ... and bytes is done in-process (no ripgrep)
SMALL_SEARCH_ENTRIES = 512  # folder entries the size probe may look at before calling a tree big
DEADLINE_CHECK_LINES = 4096  # the walk looks at the clock this often (and once per file)
_RG_LINE_LIMIT = 32 * 1024 * 1024  # one JSON event holds a whole line; minified files have long ones
_SKIP_DIRS = frozenset({"node_modules", ".git"})
_WILDCARD = re.compile(r"[*?\[]")
_REGEX = re.compile(r"^/(.+)/([a-z]*)$", re.DOTALL)


@dataclass(frozen=True)
class Matcher:
    """A substring, or a compiled regex when the pattern was written as /.../flags."""

    literal: str | None
    regex: Any = None  # a compiled re2 pattern (linear-time matching)
    ignore_case: bool = False
    source: str = ""  # the regex as written, for ripgrep

    def find(self, line: str) -> int:
        """0-based column of the first match, or -1."""
        if self.regex is not None:
            m = self.regex.search(line)
            return m.start() if m else -1
        return line.find(self.literal or "")

    def rg_args(self) -> list[str]:
        if self.regex is not None:
            return ["-i", "-e", self.source] if self.ignore_case else ["-e", self.source]
        return ["-F", "-e", self.literal or ""]


@dataclass(frozen=True)
class Target:
    base: Resolved  # folder or single file
    include: str | None  # glob relative to base, or None for everything
    skip: frozenset[str] = frozenset()  # real paths below base that are off limits (never searched)


@dataclass
class Found:
    matches: list[dict[str, Any]] = field(default_factory=list)
    files_scanned: int = 0
    truncated: bool = False


@dataclass(frozen=True)
class SmallSearch:
    """Every file a search would read, when they are few and small enough to scan in-process."""

    files: list[tuple[str, str]]  # (real path, alias)
    total_bytes: int



class _TooBig(Exception):
    pass


class SearchTimedOut(Exception):
    """The search's deadline passed; the walk stops at its next check."""


def check_deadline(deadline: float | None) -> None:
    if deadline is not None and time.monotonic() > deadline:
        raise SearchTimedOut


def make_matcher(pattern: str) -> Matcher:
    m = _REGEX.match(pattern)
    if m is None or set(m.group(2)) - {"i"}:
        return Matcher(literal=pattern, regex=None)
    ignore_case = "i" in m.group(2)
    import re2  # loaded with the first regex search, not by every process that offers the tool

    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = not ignore_case
    try:
        regex = re2.compile(m.group(1), options)
    except re2.error as exc:
        why = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise CrewError(
            "E_INVALID_ARGS",
            f"The pattern is not a valid regular expression: {why}. "
            "Look-around and back-references are not supported.",
        ) from None
    return Matcher(literal=None, regex=regex, ignore_case=ignore_case, source=m.group(1))


def targets_for(args: SearchArgs, ctx: ToolContext) -> list[Target]:
    """`path` plus the legacy `globs` (alias globs like @project/artifacts/*.md, or globs relative to path)."""
    off_limits = ctx.mounts.off_limits
    if not args.globs:
        base = resolve(ctx.mounts, args.path, write=False)
        return [Target(base, None, off_limits.skipped_in(base.real))]
    out = []
    for glob in args.globs:
        spec = glob if glob.startswith(("@", "artifacts/")) else f"{args.path.rstrip('/')}/{glob}"
        parts = spec.replace("\\", "/").split("/")
        cut = next((i for i, p in enumerate(parts) if _WILDCARD.search(p)), len(parts))
        base = resolve(ctx.mounts, "/".join(parts[:cut]), write=False)
        out.append(Target(base, "/".join(parts[cut:]) or None, off_limits.skipped_in(base.real)))
    return out


async def search(args: SearchArgs, ctx: ToolContext) -> ToolOutcome:
    matcher = make_matcher(args.pattern)
    targets = [t for t in targets_for(args, ctx) if os.path.exists(t.base.real)]
    if not targets:
        shown = ", ".join(args.globs) if args.globs else resolve(ctx.mounts, args.path, write=False).alias
        raise CrewError("ENOENT", f"Nothing to search: {shown} does not exist.")
    limit = min(args.maxMatches, ctx.policy.max_search_matches)
    seconds = ctx.policy.max_search_seconds
    deadline = time.monotonic() + seconds
    try:
        async with asyncio.timeout(seconds):
            found = await _search(targets, matcher, args.before, args.after, limit, deadline)
    except (TimeoutError, SearchTimedOut):
        message = (
            f"The search was stopped after {seconds:g} seconds. "
            "Search a smaller folder, or use a simpler pattern or a plain text."
        )
        return ToolOutcome(fail("E_TIMEOUT", message))
    return ToolOutcome(result_of(targets[0].base.alias, found, limit))


async def _search(
    targets: list[Target], matcher: Matcher, before: int, after: int, limit: int, deadline: float
) -> Found:
    found = await asyncio.to_thread(_search_small, targets, matcher, before, after, limit, deadline)
    if found is not None:
        return found
    rg = _ripgrep()
    if rg is not None:
        found = await rg_search(rg, targets, matcher, before, after, limit)
    if found is None:  # no ripgrep, or a regex ripgrep does not support
        found = await asyncio.to_thread(python_search, targets, matcher, before, after, limit, deadline)
    return found


def _ripgrep() -> str | None:
    """The `rg` on PATH, else the one the `ripgrep` wheel put beside this Python (a venv not activated)."""
    return shutil.which("rg") or shutil.which("rg", path=os.path.dirname(sys.executable))


def _search_small(
    targets: list[Target], matcher: Matcher, before: int, after: int, limit: int, deadline: float
) -> Found | None:
    """The in-process search, or None when the tree is too big for it."""
    small = small_search(targets)
    if small is None:
        return None
    return search_files(small.files, matcher, before, after, limit, deadline)


def small_search(
    targets: list[Target],
    *,
    max_files: int = SMALL_SEARCH_FILES,
    max_bytes: int = SMALL_SEARCH_BYTES,
    max_entries: int = SMALL_SEARCH_ENTRIES,
) -> SmallSearch | None:
    """The files to scan, or None as soon as the walk finds the search is too big for in-process."""
    files: list[tuple[str, str]] = []
    total = 0
    budget = [max_entries]
    try:
        for target in targets:
            for real, rel in _walk(target, budget):
                total += os.stat(real).st_size
                files.append((real, alias_of(target.base.mount, rel)))
                if len(files) > max_files or total > max_bytes:
                    return None
    except (_TooBig, OSError):
        return None
    return SmallSearch(files, total)


def result_of(path: str, found: Found, limit: int) -> dict[str, Any]:
    result = ok(
        path=path,
        matches=found.matches,
        truncated=found.truncated,
        stats={"filesScanned": found.files_scanned, "matchesFound": len(found.matches)},
    )
    if found.truncated:
        result["hint"] = f"Stopped after {limit} matches. Narrow the path or the pattern to see the rest."
    return result


# --- Python walk -----------------------------------------------------------------------------


def python_search(
    targets: list[Target], matcher: Matcher, before: int, after: int, limit: int, deadline: float | None = None
) -> Found:
    files = ((real, alias_of(t.base.mount, rel)) for t in targets for real, rel in _walk(t))
    return search_files(files, matcher, before, after, limit, deadline)


def search_files(
    files: Iterable[tuple[str, str]],
    matcher: Matcher,
    before: int,
    after: int,
    limit: int,
    deadline: float | None = None,
) -> Found:
    """Scan (real path, alias) pairs in order, stopping once more than `limit` matches exist.

    Raises SearchTimedOut once `deadline` (a time.monotonic() value) has passed.
    """
    found = Found()
    for real, alias in files:
        check_deadline(deadline)
        if _search_file(real, alias, matcher, before, after, limit, found, deadline):
            break
    return found


def _walk(target: Target, budget: list[int] | None = None) -> Iterator[tuple[str, str]]:
    """(real path, path inside the mount) of every searchable file, in name order.

    `budget` counts down folder entries looked at; running out raises _TooBig.
    """
    base = target.base
    if os.path.isfile(base.real):
        yield str(base.real), base.rel
        return
    stack = [(str(base.real), "")]
    while stack:
        folder, rel_folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                listed = list(it) if budget is None else list(itertools.islice(it, budget[0] + 1))
        except OSError:
            continue
        if budget is not None:
            budget[0] -= len(listed)
            if budget[0] < 0:
                raise _TooBig
        entries = sorted(listed, key=lambda e: e.name, reverse=True)
        files = []
        for entry in entries:
            if entry.name.startswith(".") or entry.is_symlink() or entry.path in target.skip:
                continue
            rel = f"{rel_folder}/{entry.name}" if rel_folder else entry.name
            if entry.is_dir():
                if entry.name not in _SKIP_DIRS:
                    stack.append((entry.path, rel))
            elif entry.is_file() and _included(rel, target.include):
                files.append((entry.path, rel))
        for path, rel in reversed(files):
            yield path, f"{base.rel}/{rel}" if base.rel else rel


def _included(rel: str, include: str | None) -> bool:
    if include is None:
        return True
    pattern = include.removeprefix("**/")
    return fnmatch.fnmatchcase(rel, include) or fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], pattern)


def _search_file(
    real: str,
    alias: str,
    matcher: Matcher,
    before: int,
    after: int,
    limit: int,
    found: Found,
    deadline: float | None = None,
) -> bool:
    """Add this file's matches; True once more than `limit` matches exist (the search stops)."""
    try:
        with open(real, "rb") as fh:
            data = fh.read()
    except OSError:
        return False
    found.files_scanned += 1
    if b"\x00" in data[:8192]:
        return False  # binary
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    for i, line in enumerate(lines):
        if i % DEADLINE_CHECK_LINES == DEADLINE_CHECK_LINES - 1:
            check_deadline(deadline)
        col = matcher.find(line)
        if col < 0:
            continue
        if len(found.matches) >= limit:
            found.truncated = True
            return True
        found.matches.append(
            _match(alias, i + 1, col + 1, line, lines[max(0, i - before) : i], lines[i + 1 : i + 1 + after])
        )
    return False


def _match(alias: str, line_no: int, column: int, text: str, before: list[str], after: list[str]) -> dict[str, Any]:
    return {
        "path": alias,
        "line": line_no,
        "column": column,
        "text": _clip(text),
        "before": [_clip(t) for t in before],
        "after": [_clip(t) for t in after],
    }


def _clip(line: str) -> str:
    line = line.rstrip("\r\n")
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS] + "…"


# --- ripgrep ---------------------------------------------------------------------------------


async def rg_search(
    rg: str, targets: list[Target], matcher: Matcher, before: int, after: int, limit: int
) -> Found | None:
    found = Found()
    for target in targets:
        if not await _rg_target(rg, target, matcher, before, after, limit, found):
            return None
        if found.truncated:
            break
    return found


async def _rg_target(
    rg: str, target: Target, matcher: Matcher, before: int, after: int, limit: int, found: Found
) -> bool:
    """Run rg on one target, adding to `found`. False when rg rejected the pattern."""
    base = target.base
    is_file = os.path.isfile(base.real)
    cwd = os.path.dirname(base.real) if is_file else str(base.real)
    proc = await asyncio.create_subprocess_exec(
        *_rg_command(rg, target, matcher, before, after, limit, is_file),
        cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL, limit=_RG_LINE_LIMIT,
    )
    assert proc.stdout is not None
    prefix = base.rel.rsplit("/", 1)[0] if is_file and "/" in base.rel else ("" if is_file else base.rel)
    lines: dict[int, str] = {}
    hits: list[tuple[int, int]] = []
    matched_files = 0
    scanned: int | None = None  # from rg's summary; missing when we stop it early
    read_all = False
    try:
        while raw := await proc.stdout.readline():
            event = json.loads(raw)
            kind, data = event.get("type"), event.get("data", {})
            if kind == "begin":
                lines, hits = {}, []
            elif kind in ("match", "context"):
                text = _rg_text(data.get("lines", {}))
                lines[data["line_number"]] = text
                if kind == "match":
                    start = (data.get("submatches") or [{"start": 0}])[0]["start"]
                    hits.append((data["line_number"], len(text.encode()[:start].decode(errors="replace")) + 1))
            elif kind == "end":
                matched_files += 1
                rel = _rg_text(data.get("path", {})).removeprefix("./")
                alias = alias_of(base.mount, f"{prefix}/{rel}" if prefix else rel)
                if not _add_file_matches(found, alias, hits, lines, before, after, limit):
                    break
            elif kind == "summary":
                scanned = (data.get("stats") or {}).get("searches", matched_files)
        else:
            read_all = True  # rg closed its output: it is exiting by itself
    except (ValueError, asyncio.LimitOverrunError):
        return False  # a line too long to stream: the Python walk redoes the whole search
    finally:
        if not read_all and proc.returncode is None and not _exited(proc.pid):
            proc.kill()  # we stopped reading early; rg may still be searching
        await proc.wait()
    found.files_scanned += scanned if scanned is not None else matched_files
    if proc.returncode == 2 and not found.matches:
        return False  # pattern error (e.g. a regex feature Rust's engine lacks): use the Python walk
    return True


def _rg_command(
    rg: str, target: Target, matcher: Matcher, before: int, after: int, limit: int, is_file: bool
) -> list[str]:
    """rg's arguments for one target: JSON events, no config or ignore files, deps and .git skipped."""
    cmd = [rg, "--json", "--no-config", "--no-ignore", "--no-messages", "--max-count", str(limit + 1)]
    cmd += ["-B", str(before), "-A", str(after), "--glob", "!node_modules", "--glob", "!.git"]
    if target.include:
        cmd += ["--glob", target.include]
    for real in sorted(target.skip):  # after the include: ripgrep lets the last matching glob decide
        cmd += ["--glob", "!/" + _glob_escape(os.path.relpath(real, target.base.real))]
    return cmd + [*matcher.rg_args(), "--", os.path.basename(target.base.real) if is_file else "."]


def _glob_escape(path: str) -> str:
    """A path as a literal ripgrep glob (a hidden file may be called `[draft].md`)."""
    return re.sub(r"([*?\[\]{}\\!])", r"\\\1", path)


def _add_file_matches(
    found: Found, alias: str, hits: list[tuple[int, int]], lines: dict[int, str], before: int, after: int, limit: int
) -> bool:
    """Add one file's hits with their context lines; False once `limit` is reached (found is truncated)."""
    for line_no, col in hits:
        if len(found.matches) >= limit:
            found.truncated = True
            return False
        found.matches.append(
            _match(
                alias,
                line_no,
                col,
                lines[line_no],
                [lines[n] for n in range(line_no - before, line_no) if n in lines],
                [lines[n] for n in range(line_no + 1, line_no + after + 1) if n in lines],
            )
        )
    return True


def _exited(pid: int) -> bool:
    """True once the child has exited, without collecting it.

    asyncio's child watcher collects the exit status; `Process.kill()` on a child that already
    exited would collect it first (Popen polls before signalling), and asyncio then logs
    "Unknown child process pid ..., will report returncode 255". So rg is only killed when we
    stopped reading early and it is still running; after the end of its output it is waited for.
    """
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True  # already collected by the watcher


def _rg_text(field_: dict[str, Any]) -> str:
    if "text" in field_:
        return field_["text"]
    return base64.b64decode(field_.get("bytes", "")).decode("utf-8", errors="replace")

