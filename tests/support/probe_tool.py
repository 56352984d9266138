"""A command-like tool for the approval tests, registered the normal way (a `Tool` in the registry).

A command not allowed for the run asks the owner first (an ApprovalRequest offering its first two
words as the prefix to allow for the run); an approved or allowed one "runs": it is appended to
`ran` with who approved it, and its result names the command and the run's allowed prefixes.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from crewagent.core.tools.base import ApprovalRequest, ToolContext, ToolOutcome, ok
from crewagent.core.base.wrappers import unwrap_user_input
from crewagent.core.tools.registry import Tool
from tests.support.fakes.llm_server import Reply
from tests.support.scripts import Body, calls, messages, previous_results

PROBE = "probe_run"
ASK = "What should I run?"


class ProbeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str


def probe_tool(ran: list[tuple[str, str | None]]) -> Tool:
    async def probe(args: ProbeArgs, ctx: ToolContext) -> ToolOutcome:
        allowed = any(args.command == p or args.command.startswith(p + " ") for p in ctx.allowed_for_run)
        if ctx.approved is None and not allowed:
            request = ApprovalRequest(
                kind="command",
                title="Run a command?",
                message=f"```\n{args.command}\n```",
                denied_code="COMMAND_DENIED",
                allow_for_run=" ".join(args.command.split()[:2]),
            )
            return ToolOutcome({"ok": False}, approval=request)
        ran.append((args.command, ctx.approved))
        return ToolOutcome(ok(exitCode=0, command=args.command, allowedForRun=sorted(ctx.allowed_for_run)))

    return Tool(PROBE, ProbeArgs, probe)


def commands_model(body: Body) -> Reply:
    """'diff please' → two git diffs (the second allowed by the first's answer); 'once more' → a git
    diff and an `rm -rf`; says what happened."""
    results = previous_results(body)
    last = last_user(body)
    if results and results[-1].get("command") == "git diff --stat":
        return calls((PROBE, {"command": "git diff HEAD"}))
    if results and results[-1].get("command") == "git diff HEAD":
        return Reply(content="Diffed twice. What next?")
    if results and (results[-1].get("error") or {}).get("code") == "COMMAND_DENIED":
        return Reply(content="Not removed. What next?")
    if last == "diff please":
        return calls((PROBE, {"command": "git diff --stat"}))
    if last == "once more":
        return calls((PROBE, {"command": "git diff main"}), (PROBE, {"command": "rm -rf build"}))
    return Reply(content=ASK)


def last_user(body: Body) -> str:
    """What the user said last, unless tool results followed it."""
    for message in reversed(messages(body)):
        if message.get("role") == "user":
            return unwrap_user_input(str(message.get("content") or ""))
        if message.get("role") == "tool":
            return ""
    return ""
