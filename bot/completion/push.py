"""Commit & push from Slack: the click (or `auto_push`) on a completed run, reported in its thread.

The author is the configured one, else the clicking user's Slack profile (users.info). What git
said goes to the log (scrubbed); the thread gets a plain sentence, a branch name and a link.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from dataclasses import dataclass

from crewagent.core.api.checkout import Author, Checkout, Delivery, ForgeSettings
from crewagent.core.api.errors import CrewError
from crewagent.core.api.events import RunPhase
from crewagent.core.api.packages import Package
from crewagent.core.api.runs import RunManager, RunRecord

from ..render import blocks
from ..render.message import SlackMessage
from ..config import GitOptions
from ..render.push_blocks import delivering_note, delivery_message
from ..outgoing import Edit, Post
from ..slack_port import SlackPort
from .pull_request import pull_request_for
from ..base.thread import ThreadKey

log = logging.getLogger(__name__)


@dataclass
class Deliveries:
    io: SlackPort
    runs: RunManager
    options: GitOptions
    forge: ForgeSettings | None = None  # `forge:`: a pushed branch gets its pull request

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
            await self.io.send(Post(channel, thread_ts, blocks.error(exc.message)))
            return
        if run.worktree is None:
            note = "This run's project is a plain folder: there is no branch to push."
            await self.io.send(Post(channel, thread_ts, blocks.notice(note)))
            return
        if run.phase is not RunPhase.COMPLETED:
            note = "The run is not complete yet; push it once it has finished."
            await self.io.send(Post(channel, thread_ts, blocks.notice(note)))
            return
        package = next((p for p in packages if p.id == run.package_id), None)
        workflow = package.workflow(run.workflow_id) if package else None
        author, requested_by = await self.author(user)
        text, note_blocks = delivering_note()
        note_ts = (await self.io.send(Post(channel, thread_ts, SlackMessage(text=text, blocks=note_blocks)))).ts
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
            outcome = await self._delivered(key, checkout, run, package, result, requested_by, completion_ts)
            await asyncio.to_thread(  # the operator's audit: who delivered which run, where
                self.runs.store.audit, run, "delivery", by=user, channel=channel, outcome=result.outcome,
                branch=result.branch, pushed=result.pushed,
            )
        if note_ts is None or not (await self.io.send(Edit(channel, note_ts, outcome))).sent:
            await self.io.send(Post(channel, thread_ts, outcome))

    async def _delivered(
        self, key: ThreadKey, checkout: Checkout, run: RunRecord, package: Package | None, result: Delivery,
        requested_by: str, completion_ts: str | None,
    ) -> SlackMessage:
        """What the thread is told about a delivery (with `forge:`, its pull request); a pushed run's
        completion message is redrawn to show the branch as pushed."""
        refusal = None
        if result.pushed and self.forge is not None:
            result, refusal = await self._with_pull_request(checkout, run, package, result, requested_by)
        if result.pushed:
            await asyncio.to_thread(self.runs.update, run)
        text, result_blocks = delivery_message(result, pull_request_refusal=refusal)
        log.info("delivery", extra={"run_id": run.run_id, "outcome": result.outcome, "branch": result.branch})
        if result.pushed and completion_ts and package is not None:
            snapshot = await asyncio.to_thread(self.runs.snapshot, run, package)
            await self.io.send(Edit(key.channel, completion_ts, blocks.completion(snapshot, key=str(key))))
        return SlackMessage(text=text, blocks=result_blocks)

    async def _with_pull_request(
        self, checkout: Checkout, run: RunRecord, package: Package | None, result: Delivery, requested_by: str
    ) -> tuple[Delivery, str | None]:
        """The pushed branch with its pull request (opened, or the open one found), or with the sentence
        saying why there is none; the branch stays pushed either way."""
        assert self.forge is not None
        snapshot = await asyncio.to_thread(self.runs.snapshot, run, package) if package is not None else None
        opened = await pull_request_for(self.forge, checkout, run, snapshot, requested_by)
        url = opened.url if opened.ok else result.pull_request_url  # else the forge's page for opening one
        if run.delivery is not None:
            run.delivery.pull_request_url = url
        return dataclasses.replace(result, pull_request_url=url), (None if opened.ok else opened.message)
