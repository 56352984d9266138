"""Commit & push from Slack: the click (or `auto_push`) on a completed run, reported in its thread.

The author is the configured one, else the clicking user's Slack profile (users.info). What git
said goes to the log (scrubbed); the thread gets a plain sentence, a branch name and a link.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from core.api.checkout import Author, Checkout
from core.api.errors import CrewError
from core.api.events import RunPhase
from core.api.packages import Package
from core.api.runs import RunManager

from ..render import blocks
from ..render.message import SlackMessage
from ..config import GitOptions
from ..render.push_blocks import delivering_note, delivery_message
from ..slack_io import SlackIO
from ..base.thread import ThreadKey

log = logging.getLogger(__name__)


@dataclass
class Deliveries:
    io: SlackIO
    runs: RunManager
    options: GitOptions

    async def author(self, user: str) -> tuple[Author, str]:
        """(commit author, the `Requested-by` line) for a Slack user."""
        name, email = await self.io.user_identity(user)
        shown = name or user
        author = Author(
            name=self.options.author_name or shown,
            email=self.options.author_email or email or f"{user}@users.slack.invalid",
        )
        return author, f"{shown} (Slack user {user})"

    async def deliver(
        self,
        key: ThreadKey,
        checkout: Checkout,
        packages: list[Package],
        run_id: str,
        user: str,
        *,
        completion_ts: str | None,
    ) -> None:
        """Commit and push one run's branch; the outcome is posted, the completion message redrawn."""
        channel, thread_ts = key.channel, key.thread_ts
        try:
            run = await asyncio.to_thread(self.runs.get, run_id)
        except CrewError as exc:
            await self.io.post(channel, thread_ts, blocks.error(exc.message))
            return
        if run.worktree is None:
            note = "This run's project is a plain folder: there is no branch to push."
            await self.io.post(channel, thread_ts, blocks.notice(note))
            return
        if run.phase is not RunPhase.COMPLETED:
            note = "The run is not complete yet; push it once it has finished."
            await self.io.post(channel, thread_ts, blocks.notice(note))
            return
        package = next((p for p in packages if p.id == run.package_id), None)
        workflow = package.workflow(run.workflow_id) if package else None
        author, requested_by = await self.author(user)
        text, note_blocks = delivering_note()
        note_ts = await self.io.post(channel, thread_ts, SlackMessage(text=text, blocks=note_blocks))
        try:
            result = await checkout.deliver(
                run,
                workflow_name=workflow.display_name if workflow else run.workflow_id,
                author=author,
                requested_by=requested_by,
            )
        except CrewError as exc:
            outcome = blocks.error(exc.message)
        else:
            if result.pushed:
                await asyncio.to_thread(self.runs.update, run)
            text, result_blocks = delivery_message(result)
            outcome = SlackMessage(text=text, blocks=result_blocks)
            log.info("delivery", extra={"run_id": run.run_id, "outcome": result.outcome, "branch": result.branch})
            await asyncio.to_thread(  # the operator's audit: who delivered which run, where
                self.runs.store.audit, run, "delivery", by=user, channel=channel, outcome=result.outcome,
                branch=result.branch, pushed=result.pushed,
            )
            if result.pushed and completion_ts and package is not None:
                snapshot = await asyncio.to_thread(self.runs.snapshot, run, package)
                await self.io.update(channel, completion_ts, blocks.completion(snapshot, key=str(key)))
        if note_ts is None or not await self.io.update(channel, note_ts, outcome):
            await self.io.post(channel, thread_ts, outcome)
