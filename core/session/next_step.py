"""The next step of a cycle: after a run completes, start the workflow its package names next, in the
same conversation, with that workflow's agent, on the same branch as the run before.

The new run continues the previous run's worktree and branch (a story written by create-story is
where dev-story builds it, and code-review reads both), and it is told, on every turn, which run it
follows and which files that run wrote. Only a step the package really offers after the previous
run's workflow starts; anything else (an old button, a forged click) is refused in words.
"""

from __future__ import annotations

import asyncio

from ..base.errors import CrewError
from ..base.events import RunPhase
from ..package.models import Package
from ..store.runs_model import RunRecord
from . import runmode
from .context import Deps, OutputStream
from .model import Session

ARTIFACTS_NAMED = 30


async def start_next(
    deps: Deps, session: Session, previous_run_id: str, workflow_id: str, out: OutputStream
) -> None:
    """Start `workflow_id` as the step after `previous_run_id`, or raise a CrewError saying why not."""
    previous = await _previous(deps, session, previous_run_id)
    package = deps.catalog.package(previous.package_id)
    if package is None:
        raise CrewError("PACKAGE_NOT_FOUND", "The package of the previous run is no longer loaded here.")
    step = next((s for s in package.next_after(previous.workflow_id) if s.workflow == workflow_id), None)
    if step is None:
        raise CrewError(
            "NEXT_STEP_UNKNOWN", "That step is not offered after this run any more; use the newest buttons."
        )
    agent = package.agent(step.agent or previous.active_agent_id) or package.agent(previous.active_agent_id)
    if agent is None:
        raise CrewError("AGENT_NOT_FOUND", f"The agent for '{step.label}' is not in the package any more.")
    if previous.worktree is not None and deps.checkout is not None:
        await deps.checkout.ensure(previous)  # the branch's worktree is back if it was tidied away
    runmode.leave(session)
    session.package_id, session.agent_id, session.mode = package.id, agent.id, "agent"
    await runmode.start_run(
        deps, session, package, agent, workflow_id, out,
        data_message=await asyncio.to_thread(_handover_note, deps, previous, package),
        continues=previous,
    )


async def _previous(deps: Deps, session: Session, run_id: str) -> RunRecord:
    if run_id not in (session.run_id, session.last_run_id):
        raise CrewError("RUN_NOT_IN_THREAD", "That run is not the latest run of this conversation any more.")
    if session.run_id and deps.engine.is_pumping(session.run_id):
        raise CrewError("RUN_BUSY", "A run is working in this conversation; wait for it or type *stop first.")
    previous = await asyncio.to_thread(deps.runs.get, run_id)
    if previous.phase is not RunPhase.COMPLETED:
        raise CrewError("RUN_NOT_COMPLETE", "The previous run has not completed, so its next step cannot start yet.")
    return previous


def _handover_note(deps: Deps, previous: RunRecord, package: Package) -> str:
    """What the new run is told about the one it follows (paths are the project's, never the server's)."""
    workflow = package.workflow(previous.workflow_id)
    name = workflow.display_name if workflow else previous.workflow_id
    files = deps.runs.snapshot(previous, package).artifacts[:ARTIFACTS_NAMED]
    where = "on the same git branch, so its files are in @project" if previous.worktree else "in the same project"
    listed = "; its outputs: " + ", ".join(f"@project/{f}" for f in files) if files else ""
    return f"This run is the next step after the completed '{name}' run (run {previous.run_id[:8]}), {where}{listed}."
