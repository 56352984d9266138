"""fs_write and fs_apply_patch: atomic writes, state writes validated.

What lands in @project takes the owner of the folder it lands in, so a command, which runs as the
worktree's unprivileged owner when the bot is root, can edit what an agent wrote.

A file written under @project/artifacts/ is recorded in the run state's `artifacts` in the same
call; if that recording is rejected a new file is removed again, so the two never disagree.
Recording is idempotent: a file that exists but is missing from `artifacts` (the process died
between the write and the recording) is recorded when it is written again.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from ..base.atomic import atomic_write_bytes
from ..base.errors import CrewError
from .mounts import Resolved, SandboxViolation, resolve
from ..base.regular_files import NotRegularFile, read_regular
from ..document.state import STATE_ALIAS, Draft, StateDoc, apply_update, read_state, record_artifacts, render_draft
from .args import Patch, PatchArgs, WriteArgs
from .base import ToolContext, ToolOutcome, ok
from .fs_read import not_a_file
from .guard import change_state

ARTIFACTS_DIR = "artifacts/"
INLINE_WRITE_BYTES = 262_144


async def write(args: WriteArgs, ctx: ToolContext) -> ToolOutcome:
    target = resolve(ctx.mounts, args.path, write=True)
    data = args.content.encode("utf-8")
    _check_size(target, len(data), ctx)
    if target.alias == STATE_ALIAS:
        done = change_state(ctx, lambda _doc: args.content, if_match=args.ifMatchSha256)
        return ToolOutcome(
            ok(path=target.alias, bytesWritten=len(data), sha256After=done.sha256_after),
            state_changed=True,
            state=done.frontmatter,
        )
    _check_writable(target)
    existed = os.path.lexists(target.real)
    if args.ifMatchSha256:
        _check_sha(target, args.ifMatchSha256)
    shared = target.mount == "@project"  # commands edit the project as its folder's owner
    if len(data) <= INLINE_WRITE_BYTES:
        atomic_write_bytes(target.real, data, owner_from_folder=shared)
    else:
        await asyncio.to_thread(atomic_write_bytes, target.real, data, owner_from_folder=shared)
    state = _record_if_artifact(target, existed, ctx)
    outcome = ToolOutcome(
        ok(path=target.alias, bytesWritten=len(data), sha256After=hashlib.sha256(data).hexdigest()),
        state_changed=state is not None,
        artifacts_created=[target.rel] if state is not None else [],
        state=state,
    )
    if target.mount == "@project":
        outcome.files_written.append(target.alias)
    return outcome


async def apply_patch(args: PatchArgs, ctx: ToolContext) -> ToolOutcome:
    target = resolve(ctx.mounts, args.path, write=True)
    patch = args.patch
    if patch.operation == "updateFrontmatter":
        if target.alias != STATE_ALIAS:
            raise CrewError(
                "E_INVALID_ARGS",
                f"updateFrontmatter only edits {STATE_ALIAS}; for {target.alias} use operation 'replace' or fs_write.",
            )
        update = patch.update or {}

        def build(doc: StateDoc | None) -> Draft:
            if doc is None:
                raise CrewError("STATE_FILE_NOT_FOUND", f"{STATE_ALIAS} does not exist.")
            if doc.frontmatter is None:
                raise CrewError(
                    "E_INVALID_FRONTMATTER",
                    f"The current {STATE_ALIAS} cannot be parsed; rewrite it whole with fs_write.",
                )
            return render_draft(apply_update(doc.frontmatter, update), doc.body)

        done = change_state(ctx, build, if_match=patch.ifMatchSha256)
        return ToolOutcome(
            ok(path=target.alias, sha256Before=done.sha256_before, sha256After=done.sha256_after),
            state_changed=True,
            state=done.frontmatter,
        )
    return _replace(target, patch, ctx)


def _replace(target: Resolved, patch: Patch, ctx: ToolContext) -> ToolOutcome:
    if target.mount != "@project":
        raise CrewError(
            "E_INVALID_ARGS",
            f"'replace' edits @project text files only; for {STATE_ALIAS} use operation 'updateFrontmatter'.",
        )
    try:
        data = read_regular(target.real)
    except (FileNotFoundError, NotADirectoryError):
        raise CrewError("ENOENT", f"File not found: {target.alias}") from None
    except IsADirectoryError:
        raise CrewError("E_INVALID_ARGS", f"{target.alias} is a folder, not a text file.") from None
    except NotRegularFile:
        raise not_a_file(target) from None
    before = hashlib.sha256(data).hexdigest()
    if patch.ifMatchSha256 and patch.ifMatchSha256.strip().lower() != before:
        raise _sha_mismatch(target, before)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CrewError("E_INVALID_ARGS", f"{target.alias} is not a UTF-8 text file; 'replace' cannot edit it.") from None
    count = text.count(patch.oldText)
    if count != 1:
        found = "was not found" if count == 0 else f"occurs {count} times"
        fix = (
            "Read the file and copy the exact text, including whitespace."
            if count == 0
            else "Include more surrounding text so it matches exactly once."
        )
        raise CrewError(
            "E_PRECONDITION_FAILED",
            f"oldText {found} in {target.alias} ({count} matches); it must match exactly once. {fix}",
            {"path": target.alias, "matches": count},
        )
    new_data = text.replace(patch.oldText, patch.newText, 1).encode("utf-8")
    _check_size(target, len(new_data), ctx)
    atomic_write_bytes(target.real, new_data, owner_from_folder=True)  # always @project here
    outcome = ToolOutcome(
        ok(path=target.alias, sha256Before=before, sha256After=hashlib.sha256(new_data).hexdigest())
    )
    outcome.files_written.append(target.alias)
    return outcome


def _record_if_artifact(target: Resolved, existed: bool, ctx: ToolContext) -> dict[str, Any] | None:
    """Record an @project/artifacts/ file the run state does not list yet (the new state is returned).

    If recording fails, a file this call created is removed again.
    """
    rel = target.project_relative
    if rel is None or not rel.startswith(ARTIFACTS_DIR):
        return None
    if ctx.mode != "run" or ctx.mounts.state is None or ctx.graph is None:
        return None
    if existed and _recorded(ctx.mounts.state, rel):
        return None
    with ExitStack() as on_failure:
        if not existed:
            on_failure.callback(target.real.unlink, missing_ok=True)  # a file this call created goes again
        try:
            recorded = record_artifacts(ctx.mounts.state, ctx.graph, [rel])
        except CrewError as exc:
            what = "was written, but recording it" if existed else "was not written: recording it"
            raise CrewError(exc.code, f"{target.alias} {what} in {STATE_ALIAS} failed: {exc.message}", exc.details) from None
        on_failure.pop_all()
    return recorded


def _recorded(state_dir: Path, rel: str) -> bool:
    try:
        artifacts = read_state(state_dir).get("artifacts")
    except CrewError:
        return False  # let record_artifacts report the unreadable state
    return isinstance(artifacts, list) and rel in artifacts


def _check_size(target: Resolved, size: int, ctx: ToolContext) -> None:
    limit = ctx.policy.max_write_bytes
    if size > limit:
        raise CrewError(
            "E_WRITE_LIMIT",
            f"{target.alias}: the new content is {size} bytes, over the write limit of {limit} bytes. "
            "Write a shorter document or split it into several files.",
            {"bytes": size, "maxWriteBytes": limit},
        )


def _check_writable(target: Resolved) -> None:
    if target.mount == "@state" and (target.rel == "logs" or target.rel.startswith("logs/")):
        raise SandboxViolation(
            f"{target.alias}: the run's logs are written by the runtime only.",
            mount=target.mount,
            path=target.alias,
            reason="write to runtime logs",
        )
    if os.path.isdir(target.real):
        raise CrewError("E_INVALID_ARGS", f"{target.alias} is a folder; give a file path.")


def _check_sha(target: Resolved, expected: str) -> None:
    try:
        current = hashlib.sha256(read_regular(target.real)).hexdigest()
    except NotRegularFile:
        raise not_a_file(target) from None
    except FileNotFoundError:
        raise CrewError(
            "E_PRECONDITION_FAILED",
            f"{target.alias} does not exist, so ifMatchSha256 cannot match. Drop ifMatchSha256 to create it.",
        ) from None
    if expected.strip().lower() != current:
        raise _sha_mismatch(target, current)


def _sha_mismatch(target: Resolved, current: str) -> CrewError:
    return CrewError(
        "E_PRECONDITION_FAILED",
        f"{target.alias} changed since you read it (ifMatchSha256 does not match). Read it again, then retry.",
        {"path": target.alias, "sha256": current},
    )
