"""fs_read and fs_list: read-only views of the mounts."""

from __future__ import annotations

import asyncio
import codecs
import hashlib
import os
from typing import Any

from ..base.errors import CrewError
from .mounts import Resolved, resolve
from ..base.regular_files import NotRegularFile, check_regular, open_regular
from .args import ListArgs, ReadArgs
from .base import ToolContext, ToolOutcome, ok

INLINE_READ_BYTES = 262_144  # smaller files are read on the event loop; larger ones in a thread
_CHUNK = 1_048_576
READ_HINT = (
    "File too large. Use fs_search to locate relevant sections, "
    "then fs_read({path, startLine, endLine}) to fetch a small window."
)


async def read(args: ReadArgs, ctx: ToolContext) -> ToolOutcome:
    target = resolve(ctx.mounts, args.path, write=False)
    size = _file_size(target)
    limit = ctx.policy.max_read_bytes
    try:
        if size <= INLINE_READ_BYTES:
            result = read_file(target, limit, args.startLine, args.endLine)
        else:
            result = await asyncio.to_thread(read_file, target, limit, args.startLine, args.endLine)
    except NotRegularFile:  # swapped for a pipe since the size check
        raise not_a_file(target) from None
    return ToolOutcome(result)


def read_file(target: Resolved, limit: int, start: int | None, end: int | None) -> dict[str, Any]:
    """Stream the whole file once: hash it all, keep only what the limit and window allow."""
    digest = hashlib.sha256()
    total = 0
    with open_regular(target.real) as fh:
        if start is None and end is None:
            kept = bytearray()
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                digest.update(chunk)
                total += len(chunk)
                if len(kept) < limit:
                    kept += chunk[: limit - len(kept)]
            truncated = total > limit
            text = _decode(bytes(kept), complete=not truncated)
            return _result(target, total, digest.hexdigest(), text, truncated, READ_HINT)
        first = start or 1
        lines: list[bytes] = []
        kept_bytes = 0
        truncated = False
        line_no = 0
        for line in fh:
            digest.update(line)
            total += len(line)
            line_no += 1
            if first <= line_no and (end is None or line_no <= end) and not truncated:
                if kept_bytes + len(line) > limit:
                    truncated = True
                else:
                    lines.append(line)
                    kept_bytes += len(line)
    last = first + len(lines) - 1
    text = _decode(b"".join(lines), complete=True)
    hint = f"Window too large for the read limit; the content stops at line {last}. Read from line {last + 1} on."
    result = _result(target, total, digest.hexdigest(), text, truncated, hint)
    result.update(startLine=first, endLine=max(last, first - 1), totalLines=line_no)
    if first > line_no:
        result["hint"] = f"The file has only {line_no} lines."
    return result


def _result(target: Resolved, size: int, sha: str, text: str, truncated: bool, hint: str) -> dict[str, Any]:
    if truncated:
        return ok(path=target.alias, bytes=size, sha256=sha, truncated=True, contentPreview=text, hint=hint)
    return ok(path=target.alias, bytes=size, sha256=sha, truncated=False, content=text)


def _decode(data: bytes, *, complete: bool) -> str:
    """UTF-8 with replacement; a cut in the middle of a character drops the partial bytes."""
    return codecs.getincrementaldecoder("utf-8")("replace").decode(data, final=complete)


def _file_size(target: Resolved) -> int:
    try:
        st = check_regular(target.real)
    except (FileNotFoundError, NotADirectoryError):
        raise CrewError("ENOENT", f"File not found: {target.alias}") from None
    except IsADirectoryError:
        raise CrewError("E_INVALID_ARGS", f"{target.alias} is a folder; use fs_list to see what it contains.") from None
    except NotRegularFile:
        raise not_a_file(target) from None
    return st.st_size


def not_a_file(target: Resolved) -> CrewError:
    return CrewError(
        "E_NOT_REGULAR_FILE",
        f"{target.alias} is not a plain file (a pipe, socket or device), so it cannot be read or edited.",
    )


async def list_dir(args: ListArgs, ctx: ToolContext) -> ToolOutcome:
    target = resolve(ctx.mounts, args.path, write=False)
    hidden = ctx.mounts.off_limits.skipped_in(target.real)  # left out, as the sandbox masks them
    try:
        with os.scandir(target.real) as it:
            entries = sorted(
                e.name + "/" if e.is_dir(follow_symlinks=False) else e.name
                for e in it
                if not e.name.startswith(".") and not e.is_symlink() and e.path not in hidden
            )
    except (FileNotFoundError,):
        raise CrewError("ENOENT", f"Folder not found: {target.alias}") from None
    except NotADirectoryError:
        raise CrewError("E_INVALID_ARGS", f"{target.alias} is a file; use fs_read to read it.") from None
    cap = ctx.policy.max_list_entries
    if len(entries) > cap:
        hint = f"{len(entries)} entries; showing the first {cap}. List a subfolder or use fs_search to narrow down."
        return ToolOutcome(ok(path=target.alias, entriesPreview=entries[:cap], truncated=True, hint=hint))
    return ToolOutcome(ok(path=target.alias, entries=entries, truncated=False))
