"""The pull-request step of Commit & push: once the run's branch is pushed, its pull request is
opened (or the open one found) on the configured forge, with a title and body from the run.

It runs only after a successful push, so whatever the forge says, the branch is on the team's
repository; a refusal comes back as a sentence for the thread.
"""

from __future__ import annotations

from crewagent.core.api.checkout import Checkout, ForgeSettings, PullRequestAsk, PullRequestResult, open_pull_request
from crewagent.core.api.runs import RunRecord, RunSnapshot

BODY_FILES = 20  # artifacts listed in the body


async def pull_request_for(
    forge: ForgeSettings, checkout: Checkout, run: RunRecord, snapshot: RunSnapshot | None, requested_by: str
) -> PullRequestResult:
    """The run's branch as a pull request into the project's default branch (the run must have a worktree)."""
    assert run.worktree is not None
    repo = await checkout.open()
    if repo is None or not repo.remote_url:
        return PullRequestResult(message="The project has no remote repository, so no pull request was opened.")
    name = snapshot.workflow_name if snapshot else run.workflow_id
    ask = PullRequestAsk(
        remote_url=repo.remote_url,
        head=run.worktree.branch,
        base=run.worktree.base_branch,
        title=f"{name}: results of run {run.run_id[:8]}",
        body=_body(run, snapshot, name, requested_by),
    )
    return await open_pull_request(forge, ask)


def _body(run: RunRecord, snapshot: RunSnapshot | None, name: str, requested_by: str) -> str:
    lines = [f"The **{name}** workflow's results, delivered from Slack by CrewAgent.", ""]
    if snapshot and snapshot.cycle:
        lines += [f"Cycle: {' → '.join([*snapshot.cycle, name])}", ""]
    files = snapshot.artifacts if snapshot else []
    if files:
        lines += ["Files the run wrote:", *(f"- `{path}`" for path in files[:BODY_FILES])]
        if len(files) > BODY_FILES:
            lines.append(f"- …and {len(files) - BODY_FILES} more")
        lines.append("")
    lines += [f"Workflow: `{run.workflow_id}`", f"Run: `{run.run_id}`", f"Requested-by: {requested_by}"]
    return "\n".join(lines) + "\n"
