"""The `shell_run` tool: policy, approval, the sandboxed run, its log with the run, and its audit event.

Never raises: every problem is a ToolOutcome with a code (COMMAND_FORBIDDEN, COMMAND_INVALID,
COMMAND_TIMEOUT, COMMAND_STOPPED, COMMAND_OUT_OF_MEMORY, COMMAND_DISK_LIMIT, SANDBOX_UNAVAILABLE; COMMAND_DENIED
comes from the approval). Real host paths
never reach the model: output is scrubbed back to @project / @pkg.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from datetime import datetime, timezone
from typing import Any

from ...base.atomic import atomic_write_bytes
from ..args import ShellRunArgs
from ..base import ApprovalRequest, ToolContext, ToolOutcome, fail, ok
from ..mounts import SandboxViolation, resolve
from .bwrap import find_uv
from .command_config import CommandsConfig
from .command_line import CommandLineInvalid
from .command_policy import Verdict, decide, decide_unreadable
from .command_runner import Finished
from .command_progress import CommandReporter
from .command_sandbox import SandboxState, execute, prepare, sandbox_state, shell_accepts
from .output_capture import OutputCapture
from .script_hookup import wait_for_scripts
from .sandbox_layout import Layout, layout_for, scrub

log = logging.getLogger(__name__)
LOG_FOLDER = "logs/commands"
AUDITED_COMMAND_CHARS = 2_000
DENIED = "COMMAND_DENIED"


async def shell_run(args: ShellRunArgs, ctx: ToolContext) -> ToolOutcome:
    config = ctx.policy.shell
    if config is None or ctx.mode != "run" or ctx.mounts.state is None:
        return ToolOutcome(fail("TOOL_NOT_AVAILABLE", "shell_run is not available here."))
    command = args.command
    try:
        folder = resolve(ctx.mounts, args.cwd or "@project", write=False)
    except SandboxViolation as exc:
        return _refused(ctx, command, args.cwd or "@project", "COMMAND_INVALID", f"cwd: {exc.message}")
    if folder.mount != "@project" or not folder.real.is_dir():
        return _refused(ctx, command, folder.alias, "COMMAND_INVALID",
                        f"cwd must be a folder under @project (got {folder.alias}).")
    try:
        verdict = decide(command, config, ctx.allowed_for_run)
    except CommandLineInvalid as exc:
        if not await shell_accepts(command):
            return _refused(ctx, command, folder.alias, "COMMAND_INVALID",
                            f"The command line cannot be parsed ({exc}). Send one valid shell command line.")
        verdict = decide_unreadable(command, config)
    if verdict.decision == "forbid":
        return _refused(ctx, command, folder.alias, "COMMAND_FORBIDDEN",
                        f"The operator's policy forbids this command ({verdict.reason}). Do not retry it; "
                        "find another way or tell the user.", verdict=verdict)
    timeout = min(args.timeout_seconds or config.timeout_seconds, config.timeout_seconds)
    if verdict.decision == "ask" and ctx.approved is None:
        return ToolOutcome({}, approval=_approval(command, folder.alias, timeout, config, verdict))
    state = await sandbox_state(config)
    if not state.usable:
        log.error("shell_run: the sandbox is unavailable: %s", state.problem)
        return _refused(ctx, command, folder.alias, "SANDBOX_UNAVAILABLE",
                        "Commands cannot run here: the sandbox is unavailable on this server. "
                        "Tell the user; the operator's log says how to fix it.", verdict=verdict, sandbox=state.backend)
    return await _run(ctx, config, state, command, folder.rel, folder.alias, timeout, verdict)


async def _run(ctx: ToolContext, config: CommandsConfig, state: SandboxState, command: str, rel: str, shown_cwd: str,
               timeout: int, verdict: Verdict) -> ToolOutcome:
    await wait_for_scripts(config, ctx.mounts.pkg, command, timeout)
    extras = config.extras
    layout = await asyncio.to_thread(
        layout_for, ctx.mounts.project, ctx.mounts.pkg, toolchain=config.toolchain,
        extra_read_only=extras.read_only, off_limits=ctx.mounts.off_limits, uv=find_uv(), git=ctx.mounts.git,
    )
    capture = OutputCapture(config.output_limit_bytes)
    progress = CommandReporter(ctx, command, shown_cwd, capture, layout)
    try:
        prepared = await asyncio.to_thread(prepare, state, config, layout, command, rel, timeout)
        async with progress:
            finished = await execute(state, prepared, timeout, capture, stop=ctx.stop_requested)
    except OSError as exc:
        log.error("shell_run: cannot start the sandbox: %s", exc)
        return _refused(ctx, command, shown_cwd, "SANDBOX_UNAVAILABLE",
                        "The command could not be started in the sandbox. Tell the user; the log has details.",
                        verdict=verdict, sandbox=state.backend)
    log_alias = await _keep_log(ctx, command, capture, layout)
    stdout, stderr, truncated = capture.render()
    stdout, stderr = scrub(stdout, layout), scrub(stderr, layout)
    _audit(ctx, command, shown_cwd, verdict, state.backend, finished=finished, output_bytes=capture.total, log_alias=log_alias)
    await progress.ended(finished, log_alias)
    if finished.killed == "timeout":
        longer = (f"ask for a longer timeout (up to {config.timeout_seconds} s)" if timeout < config.timeout_seconds
                  else "run a smaller part of the work")
        message = (f"The command did not finish within {timeout} s and was stopped (everything it started ended). "
                   f"Partial output is in the details; {longer}.")
        return ToolOutcome(fail("COMMAND_TIMEOUT", message, stdout=stdout, stderr=stderr,
                                durationMs=finished.duration_ms, truncated=truncated, log=log_alias))
    if finished.killed == "stopped":
        return ToolOutcome(fail("COMMAND_STOPPED", "The run's owner stopped the run; the command was ended. "
                                "Do not run it again unless asked.", stdout=stdout, stderr=stderr,
                                durationMs=finished.duration_ms, truncated=truncated, log=log_alias))
    if finished.killed in ("memory", "disk"):
        code, message = _over_bound(finished, config)
        return ToolOutcome(fail(code, message, stdout=stdout, stderr=stderr, exitCode=finished.exit_code,
                                durationMs=finished.duration_ms, truncated=truncated, log=log_alias))
    return ToolOutcome(ok(exitCode=finished.exit_code, stdout=stdout, stderr=stderr,
                          durationMs=finished.duration_ms, truncated=truncated, log=log_alias))


def _over_bound(finished: Finished, config: CommandsConfig) -> tuple[str, str]:
    """The error code and message of a command that passed its memory or disk bound."""
    ended = ("it was stopped (everything it started ended)" if finished.exit_code is None
             else f"it ended with exit code {finished.exit_code}")
    if finished.killed == "memory":
        return "COMMAND_OUT_OF_MEMORY", (
            f"The command's processes together needed more than the {config.limits.memory_mb} MB of memory one "
            f"command may use (limits.memory_mb): the system killed one of them and {ended}. Use less memory at "
            "once (fewer parallel workers or processes, smaller inputs), or ask the operator to raise the limit.")
    return "COMMAND_DISK_LIMIT", (
        f"The command added about {finished.disk_added_mb} MB to @project and its /tmp, more than the "
        f"{config.limits.disk_mb} MB one command may add (limits.disk_mb); {ended}. What it wrote to @project "
        "is still there: delete what is not needed (build outputs, caches, large generated files) before "
        "running more, write less, or ask the operator to raise the limit.")


def audit_denied(ctx: ToolContext, arguments: dict[str, Any], denied_by: str | None) -> None:
    """The audit event of a command the owner denied (for the engine's approval path to call)."""
    command = str(arguments.get("command") or "")
    cwd = str(arguments.get("cwd") or "@project")
    _audit(ctx, command, cwd, None, None, refused=DENIED, denied_by=denied_by)


def _approval(command: str, cwd: str, timeout: int, config: CommandsConfig, verdict: Verdict) -> ApprovalRequest:
    network = "network on" if config.network else "no network"
    message = (f"The agent wants to run a command ({verdict.reason}):\n```\n{command[:3000]}\n```\n"
               f"Folder: `{cwd}` · timeout {timeout} s · {network} · sandbox: {config.sandbox}")
    return ApprovalRequest(kind="command", title="Run a command?", message=message, denied_code=DENIED,
                           allow_for_run=verdict.allow_for_run)


async def _keep_log(ctx: ToolContext, command: str, capture: OutputCapture, layout: Layout) -> str | None:
    """The whole output, with the run (@state/logs/commands/…), where the model can read it too."""
    assert ctx.mounts.state is not None
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S%f")
    name = f"{stamp}-{hashlib.sha256(command.encode()).hexdigest()[:8]}.log"
    data = capture.log_bytes()
    for real, alias in layout.replacements:
        data = data.replace(real.encode(), alias.encode())
    header = f"$ {command}\n".encode()
    try:
        await asyncio.to_thread(atomic_write_bytes, ctx.mounts.state / LOG_FOLDER / name, header + data)
    except OSError as exc:
        log.warning("shell_run: the command's log could not be kept: %s", exc)
        return None
    return f"@state/{LOG_FOLDER}/{name}"


def _refused(ctx: ToolContext, command: str, cwd: str, code: str, message: str, *, verdict: Verdict | None = None,
             sandbox: str | None = None) -> ToolOutcome:
    _audit(ctx, command, cwd, verdict, sandbox, refused=code)
    return ToolOutcome(fail(code, message))


def _audit(ctx: ToolContext, command: str, cwd: str, verdict: Verdict | None, sandbox: str | None, *,
           finished: Finished | None = None, output_bytes: int = 0, log_alias: str | None = None,
           refused: str | None = None, denied_by: str | None = None) -> None:
    if ctx.audit is None:
        return
    event: dict[str, Any] = {
        "kind": "command.run",
        "command": command[:AUDITED_COMMAND_CHARS],
        "cwd": cwd,
        "decision": verdict.decision if verdict else None,
        "rule": verdict.rule if verdict else None,
        "reason": verdict.reason if verdict else None,
        "approvedBy": ctx.approved,
        "sandbox": sandbox,
    }
    if refused:
        event["refused"] = refused
    if denied_by:
        event["deniedBy"] = denied_by
    if finished is not None:
        event.update(exitCode=finished.exit_code, durationMs=finished.duration_ms, outputBytes=output_bytes,
                     killed=finished.killed, diskAddedMb=finished.disk_added_mb, log=log_alias)
    try:
        ctx.audit(event)
    except OSError:  # a full or unwritable disk must not turn a finished command into a failed call
        log.exception("audit write failed for a command")
