"""RunMode: bind a conversation to a workflow run and pump the engine (its events become outputs in run_outputs).

A finished run keeps the session in RunMode, so the user can keep talking about its results. The run
controls here are the same whether the user typed `*pause` or pressed a button.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from ..base.answers import UserInput
from ..run.engine import PumpResult
from ..base.errors import CrewError
from ..base.events import RunPhase
from .outputs import Dismissed, ErrorOutput, Notice, RunStarted, RunStatus, WidgetRequest
from ..package.models import Agent, Package
from ..store.runs_model import RunRecord
from .context import Deps, OutputStream
from .run_outputs import RunOutputs
from .model import PendingWidget, Session
from .model_command import chosen_model

Intent = Literal["start", "continue", "resume"]
RunControl = Literal["pause", "stop", "resume", "retry", "status", "dismiss"]


async def start_run(
    deps: Deps,
    session: Session,
    package: Package,
    agent: Agent,
    workflow_id: str,
    out: OutputStream,
    *,
    data_message: str | None = None,
    user_input: str | None = None,
    continues: RunRecord | None = None,
) -> None:
    """Create a run bound to this conversation (RunMode) and pump it until it needs the user.

    In a git project the run gets its own worktree and branch first (see core.checkout), unless it
    `continues` an earlier run (the next step of a cycle): then it works on that run's branch."""
    run_id = deps.runs.new_run_id()
    worktree = continues.worktree if continues is not None else None
    if deps.checkout is not None and worktree is None:
        workflow = package.resolve_workflow(workflow_id)
        made = await deps.checkout.new_worktree(run_id, workflow.id)
        if made is not None:
            worktree = made.worktree
            for warning in made.warnings:
                await out.put(Notice(text=warning, level="warning"))
    record = await asyncio.to_thread(
        deps.runs.create,
        package,
        workflow_id,
        agent.id,
        deps.project_root,
        run_id=run_id,
        worktree=worktree,
        session_id=session.id,
    )
    if continues is not None:
        record.extra["previous_run_id"] = continues.run_id
        record.extra["cycle"] = cycle_of(continues, package)
    if data_message:
        record.extra["data_context"] = [data_message]  # the engine injects it before USER_INPUT on every turn
    if data_message or continues is not None:
        await asyncio.to_thread(deps.runs.update, record)
    bind(session, record)
    await out.put(RunStarted(snapshot=deps.runs.snapshot(record, package)))
    await pump(deps, session, record, package, intent="start", user_input=user_input or None, out=out)


def cycle_of(previous: RunRecord, package: Package) -> list[str]:
    """The workflow names of a cycle up to and including `previous` (kept in each run's `extra`)."""
    workflow = package.workflow(previous.workflow_id)
    earlier = [name for name in previous.extra.get("cycle", []) if isinstance(name, str)]
    return earlier + [workflow.display_name if workflow else previous.workflow_id]


def bound_record(deps: Deps, session: Session) -> RunRecord:
    """The session's run; if it vanished from the store, fall back to the agent with a clear error."""
    try:
        return deps.runs.get(session.run_id or "")
    except CrewError:
        session.mode = "agent" if session.agent_id else "idle"
        session.run_id = None
        session.pending_widget = None
        raise CrewError(
            "RUN_NOT_FOUND", "The run of this conversation no longer exists. Pick a menu item to start again."
        ) from None


def bind(session: Session, record: RunRecord) -> None:
    session.mode = "run"
    session.package_id = record.package_id
    session.agent_id = record.active_agent_id
    session.run_id = record.run_id
    session.last_run_id = record.run_id
    session.clarify = []
    session.menu_open = False
    session.pending_widget = None


async def pump(
    deps: Deps,
    session: Session,
    record: RunRecord,
    package: Package,
    *,
    intent: Intent,
    user_input: UserInput | None,
    out: OutputStream,
) -> PumpResult | None:
    """One engine pump; its events reach `out` as they happen (see RunOutputs)."""
    if record.worktree is not None and deps.checkout is not None:
        try:
            await deps.checkout.ensure(record)
        except CrewError as exc:
            await out.put(ErrorOutput(code=exc.code, message=exc.message))
            return None
    record.model = chosen_model(deps, session)  # the conversation's `*model`, saved with the run for its resumes
    outputs = RunOutputs(deps, session, record, package, out)
    try:
        result = await deps.engine.pump(
            record, package, intent=intent, user_input=user_input, on_event=outputs.on_event
        )
    except CrewError as exc:
        await out.put(ErrorOutput(code=exc.code, message=exc.message))
        return None
    if result.widget is not None and session.pending_widget is None:
        session.pending_widget = PendingWidget.from_payload(result.widget, record.run_id)
        await out.put(WidgetRequest(widget=result.widget, run_id=record.run_id))
    if result.phase is RunPhase.FAILED and result.error is not None:
        await out.put(
            ErrorOutput(
                code=result.error.code,
                message=f"{result.error.message} The run is saved: {deps.retry_hint}.",
            )
        )
    return result


async def continue_run(deps: Deps, session: Session, package: Package, user_input: UserInput, out: OutputStream) -> None:
    """The user's text (or their answer to the run's question) becomes the run's next input."""
    record = bound_record(deps, session)
    if deps.engine.is_pumping(record.run_id):
        await out.put(Notice(text="The run is still working. Wait for it, or type *pause / *stop.", level="warning"))
        return
    session.pending_widget = None  # any open question is answered by this input (or goes stale)
    await pump(deps, session, record, package, intent="continue", user_input=user_input, out=out)


async def resume(deps: Deps, session: Session, package: Package, record: RunRecord, out: OutputStream) -> None:
    """Bind (or re-bind) a saved run and continue it from its state (intent `resume`). A sub-workflow's
    run is resumed through the run that called it."""
    record = deps.runs.root_of(record)
    if deps.engine.is_pumping(record.run_id):
        bind(session, record)
        await out.put(Notice(text="This run is already working.", level="info"))
        return
    bind(session, record)
    snapshot = deps.runs.snapshot(record, package)
    await out.put(RunStarted(snapshot=snapshot))
    if record.phase is RunPhase.COMPLETED:
        await out.put(Notice(text="This run is complete. You can keep talking about its results here."))
        return
    await pump(deps, session, record, package, intent="resume", user_input=None, out=out)


async def control_run(deps: Deps, session: Session, package: Package, action: RunControl, out: OutputStream) -> None:
    """`*pause` `*stop` `*resume` `*status` `*dismiss` and the Retry button, for the bound run."""
    record = bound_record(deps, session)
    busy = deps.engine.is_pumping(record.run_id)
    if action == "status":
        await out.put(RunStatus(snapshot=deps.runs.snapshot(record, package)))
    elif action in ("pause", "stop"):
        if not busy:
            await out.put(Notice(text="Nothing is running right now; the run is waiting for you.", level="info"))
        elif action == "pause":
            deps.engine.request_pause(record.run_id)
            await out.put(Notice(text="Pausing after the current step. Type *resume to continue."))
        else:
            deps.engine.request_stop(record.run_id)
            await out.put(Notice(text="Stopping now. The run is saved; type *resume to continue."))
    elif action == "resume":
        if busy:
            await out.put(Notice(text="The run is already working."))
        elif record.phase is RunPhase.COMPLETED:
            await out.put(Notice(text="This run is complete. Type a message to keep talking about it."))
        else:
            session.pending_widget = None
            await pump(deps, session, record, package, intent="resume", user_input=None, out=out)
    elif action == "retry":
        if record.phase is not RunPhase.FAILED:
            await out.put(Notice(text="The run has not failed, so there is nothing to retry.", level="info"))
        elif busy:
            await out.put(Notice(text="The run is already working."))
        else:
            await pump(deps, session, record, package, intent="resume", user_input=None, out=out)
    elif action == "dismiss":
        if busy:
            deps.engine.request_stop(record.run_id)
        workflow = package.workflow(record.workflow_id)
        name = workflow.display_name if workflow else record.workflow_id
        leave(session)
        if record.phase is RunPhase.COMPLETED:
            text = f"Left the completed run '{name}'. {deps.pick_again}"
        else:
            text = f"Left the run '{name}'. It is saved: {deps.resume_later}."
        await out.put(Dismissed(text=text))


def leave(session: Session) -> None:
    """Back to idle; `last_run_id` is kept so `*resume` can find the run again."""
    session.mode = "idle"
    session.agent_id = None
    session.run_id = None
    session.clarify = []
    session.menu_open = False
    session.pending_widget = None
    session.history = []
