"""Tool calls that wait for the run owner's decision, the way the OpenAI Agents SDK handles interruptions.

A tool whose outcome carries an `ApprovalRequest` ran nothing. Its tool message is held: nothing
is recorded in its place, a `held` mark goes into the conversation log (never sent to the model),
and the pump stops at a `tool_approval` widget, as it stops at a question, so the wait survives a
restart, a replica take-over and `*stop`. The decision comes back as the run's next input:

- Approve: the same call is made again through the ToolHost with `ctx.approved` set to who
  approved it, and its real result becomes the tool message.
- Deny (or a reply typed instead of a decision): the tool message is an error with the request's
  `denied_code`; the call is not made.
- Allow for this run (when the request names a prefix): approved, and the prefix is remembered in
  the log, so every later call of the run gets it in `ctx.allowed_for_run`.

The decision is a `released` mark and an audit line before anything runs, so a process killed
while the approved call runs closes it as interrupted instead of asking again. Everything here is
found again from the conversation log.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from typing import Any, Callable

from ..base.answers import ApprovalAnswer, ApprovalDecision, Decision, UserInput
from ..model.client import ToolCall
from ..prompts.composer import render
from ..store.history import History
from ..tools.audit import sanitise_input
from ..tools.base import ApprovalRequest, ToolContext, ToolOutcome, fail
from ..tools.registry import wire_name
from .tool_round import ToolRecorder

APPROVAL_TYPE = "tool_approval"
Audit = Callable[[dict[str, Any]], None]


def widget_id(call_id: str) -> str:
    return "approval-" + hashlib.sha256(call_id.encode("utf-8")).hexdigest()[:16]


def approval_widget(call: ToolCall, request: ApprovalRequest) -> dict[str, Any]:
    """What a surface shows: the title and message, and whether "allow for this run" is offered."""
    return {
        "widgetId": widget_id(call.id),
        "type": APPROVAL_TYPE,
        "kind": request.kind,
        "title": request.title,
        "message": f"**{request.title}**\n\n{request.message}",
        "tool": wire_name(call.name),
        "toolCallId": call.id,
        "allowForRun": request.allow_for_run,
    }


def answer_to(user_input: UserInput | None, widget: dict[str, Any]) -> ApprovalDecision | None:
    """The owner's decision on `widget` in this input; None when the input is something else
    (typed words, even words that look like an answer, decide nothing)."""
    if not isinstance(user_input, ApprovalAnswer) or user_input.widget_id != widget.get("widgetId"):
        return None
    if user_input.value.decision == "allow_for_run" and not widget.get("allowForRun"):
        return user_input.value.model_copy(update={"decision": "approve"})  # nothing to remember: this call only
    return user_input.value


@dataclass(frozen=True)
class HeldCall:
    """A call waiting for a decision, and the calls of the same reply after it (not run yet)."""

    call: ToolCall
    rest: tuple[ToolCall, ...]
    widget: dict[str, Any]
    denied_code: str
    scope: str | None  # the node the call was issued in, for its tool message
    question: dict[str, Any] | None  # a ui_ask_user widget an earlier call of the reply asked: asked after


class ToolApprovals:
    """The run's held calls and remembered permissions, on top of its conversation log."""

    def __init__(self, history: History, recorder: ToolRecorder, audit: Audit) -> None:
        self.history, self.recorder, self.audit = history, recorder, audit

    def allowed_for_run(self) -> frozenset[str]:
        """Command prefixes the owner allowed for the rest of this run."""
        return frozenset(
            str(m["allowForRun"]) for m in self.history.marks
            if m.get("mark") == "released" and m.get("decision") == "allow_for_run" and m.get("allowForRun")
        )

    def hold(self, call: ToolCall, request: ApprovalRequest, scope: str | None,
             question: dict[str, Any] | None = None) -> dict[str, Any]:
        """Hold the call's tool message until the owner decides; the widget to stop at."""
        widget = approval_widget(call, request)
        self.history.append_mark(
            "held", toolCallId=call.id, widget=widget, deniedCode=request.denied_code, scope=scope, question=question
        )
        self.audit({"kind": "approval.requested", "toolCallId": call.id, "tool": wire_name(call.name),
                    "approvalKind": request.kind, "title": request.title, "allowForRun": request.allow_for_run})
        return widget

    def held(self) -> HeldCall | None:
        """The call the run waits on, found again in the log."""
        ids = self.history.held_call_ids()
        if not ids:
            return None
        mark = next(m for m in reversed(self.history.marks) if m.get("mark") == "held" and m.get("toolCallId") in ids)
        for entry in reversed(self.history.entries):
            calls = [_tool_call(c) for c in entry.get("tool_calls") or ()] if entry.get("role") == "assistant" else []
            at = next((i for i, c in enumerate(calls) if c.id == mark["toolCallId"]), None)
            if at is not None:
                question = mark.get("question")
                return HeldCall(calls[at], tuple(calls[at + 1 :]), dict(mark["widget"]),
                                str(mark.get("deniedCode") or "TOOL_CALL_DENIED"), mark.get("scope"),
                                question if isinstance(question, dict) else None)
        return None

    async def decide(
        self, held: HeldCall, answer: ApprovalDecision | None, ctx: ToolContext
    ) -> tuple[ToolOutcome, ToolContext]:
        """Make or refuse the held call and record its tool message; `answer` None: the owner replied
        with something else. Returns the outcome and the context for the calls after it."""
        decision: Decision = answer.decision if answer is not None else "deny"
        by = answer.by if answer is not None else None
        prefix = held.widget.get("allowForRun") if decision == "allow_for_run" else None
        self.history.append_mark("released", toolCallId=held.call.id, decision=decision, by=by, allowForRun=prefix)
        self.audit({"kind": "approval.decided", "toolCallId": held.call.id, "tool": wire_name(held.call.name),
                    "approvalKind": held.widget.get("kind"), "decision": _AUDIT_WORD[decision], "by": by,
                    "allowForRun": prefix, "title": held.widget.get("title"), "input": _logged(held.call)})
        ctx = replace(ctx, allowed_for_run=self.allowed_for_run())
        if decision == "deny":
            self.recorder.tools.record_denial(held.call.name, held.call.arguments, ctx, by)
            outcome = denied(held.denied_code, f"{by} denied it" if by else None)
            await self.recorder.record(held.call, outcome, held.scope)
            return outcome, ctx
        outcome = await self.recorder.run(held.call, replace(ctx, approved=by), scope=held.scope)
        if outcome.approval is not None:  # a tool that asks again after its approval: refuse, never loop
            outcome = ToolOutcome(fail("E_INTERNAL", "The tool asked for approval again after it was approved; "
                                       "the call was not made."))
            await self.recorder.record(held.call, outcome, held.scope)
        return outcome, ctx

    async def refuse_unasked(self, call: ToolCall, request: ApprovalRequest, scope: str | None,
                             ctx: ToolContext) -> ToolOutcome:
        """A later call of a reply the owner answered by typing: not asked, not made."""
        self.audit({"kind": "approval.decided", "toolCallId": call.id, "tool": wire_name(call.name),
                    "approvalKind": request.kind, "decision": "denied", "by": None})
        self.recorder.tools.record_denial(call.name, call.arguments, ctx, None)
        outcome = denied(request.denied_code, None)
        await self.recorder.record(call, outcome, scope)
        return outcome


LEGACY_TYPE = "mcp_approval"  # the answer to an approval asked before held calls; its call was never held


def legacy_answer_note(user_input: UserInput | None) -> str | None:
    """What the model is told when an approval asked the older way is answered: that call was answered
    with a waiting status and is not made now, so a model that still needs it calls it again (and the
    owner is asked the new way). Without this note the model could take the answer for the call's outcome."""
    if not isinstance(user_input, ApprovalAnswer) or user_input.type != LEGACY_TYPE:
        return None
    return render("approval-answer-outdated")


_AUDIT_WORD: dict[str, str] = {"approve": "approved", "deny": "denied", "allow_for_run": "allowed_for_run"}


def denied(code: str, why: str | None) -> ToolOutcome:
    """`why` None: the owner replied with a message instead of deciding."""
    if why is None:
        message = ("The run owner replied instead of approving it: the call was not made. Read their reply; "
                   "make the call again only if they ask for it.")
    else:
        message = f"{why}: the call was not made. Do not retry it; tell the user it was not done and go on."
    return ToolOutcome(fail(code, message))


def _logged(call: ToolCall) -> Any:
    """The call's arguments as audit logs keep them (file contents as hashes, long strings shortened)."""
    try:
        return sanitise_input(json.loads(call.arguments or "{}"))
    except ValueError:
        return sanitise_input(call.arguments)


def _tool_call(raw: dict[str, Any]) -> ToolCall:
    function = raw.get("function") or {}
    return ToolCall(id=str(raw.get("id")), name=str(function.get("name") or ""),
                    arguments=str(function.get("arguments") or ""))
