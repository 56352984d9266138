"""One person's runs (or everyone's, for an admin), read from the stores the bot already keeps.

Threads come from the thread store by owner (an indexed query in both the embedded store and
Postgres), their runs from the run index by the conversations that started them. Only the runs
that will be shown get their state file read (progress, current step, artifacts), so a person with
hundreds of runs costs a handful of file reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Protocol

from crewagent.core.api.events import RunPhase
from crewagent.core.api.packages import Package
from crewagent.core.api.runs import History, RunManager, RunRecord

from ..base.thread import ThreadBrief, ThreadKey

WAITING_SHOWN = 20  # runs read in full per section; the rest are counted ("and N more")
ACTIVE_SHOWN = 20
DONE_SHOWN = 5
QUESTION_CHARS = 280
READ_TIMEOUT = 10.0  # seconds the store reads may take before the overview gives up


class Verdict(Protocol):
    @property
    def allowed(self) -> bool: ...

    @property
    def reason(self) -> str: ...


class Access(Protocol):
    """The part of the bot's AccessPolicy the Home tab and `/crew` use."""

    @property
    def allowed_channels(self) -> frozenset[str]: ...

    def is_admin(self, user: str) -> bool: ...

    def may_use(self, user: str, channel: str, *, is_dm: bool = False) -> Verdict: ...


class BriefSource(Protocol):
    async def briefs(self, owner: str | None) -> list[ThreadBrief]: ...


@dataclass(frozen=True)
class RunLine:
    """One run as the Home tab and `/crew runs` show it (no server paths)."""

    run_id: str
    key: ThreadKey
    owner: str | None
    workflow: str
    agent: str
    phase: RunPhase
    paused: bool
    since: datetime  # when the run last changed (for a waiting run: how long it has waited)
    steps_done: int = 0
    steps_total: int = 0
    step: str | None = None  # the current step's title
    question: str | None = None  # what a waiting run asked
    error: str | None = None  # why a failed run stopped
    artifacts: int = 0
    tokens: int = 0
    tokens_estimated: bool = False
    branch: str | None = None
    pull_request_url: str | None = None
    pushed: bool = False


@dataclass
class Overview:
    waiting: list[RunLine] = field(default_factory=list)  # need the person: a question, or a failure
    active: list[RunLine] = field(default_factory=list)  # running or paused
    done: list[RunLine] = field(default_factory=list)  # the latest completed
    more_waiting: int = 0
    more_active: int = 0
    more_done: int = 0
    tokens_this_week: int = 0
    runs_total: int = 0

    @property
    def empty(self) -> bool:
        return self.runs_total == 0


def week_start(now: datetime) -> datetime:
    """Monday 00:00 UTC of `now`'s week."""
    day = now.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


def parse_stamp(text: str) -> datetime:
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return datetime.fromtimestamp(0, timezone.utc)


def section_of(phase: str, paused: bool) -> str:
    if phase == RunPhase.COMPLETED.value:
        return "done"
    if phase == RunPhase.FAILED.value or (phase == RunPhase.WAITING_USER.value and not paused):
        return "waiting"
    return "active"


def _tokens(entry: dict[str, Any]) -> int:
    usage = entry.get("usage")
    if not isinstance(usage, dict):
        return 0
    total = usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)
    return sum(t for t in total if isinstance(t, int))


class RunOverview:
    """Builds an Overview for one person (or for everyone) from the thread store and the run index."""

    def __init__(
        self,
        threads: BriefSource,
        runs: RunManager,
        access: Access,
        package_of: Callable[[str, str], Package | None],
    ) -> None:
        self.threads = threads
        self.runs = runs
        self.access = access
        self.package_of = package_of  # (binding name, package id) -> the loaded package

    def visible(self, brief: ThreadBrief) -> bool:
        """Channels the bot may not be used in never appear, whoever asks."""
        allowed = self.access.allowed_channels
        return not allowed or brief.key.is_dm or brief.key.channel in allowed

    async def briefs(self, user: str | None) -> list[ThreadBrief]:
        """`user`'s threads, or every thread for None (an admin's view of all runs)."""
        found = await asyncio.wait_for(self.threads.briefs(user), READ_TIMEOUT)
        return [b for b in found if self.visible(b)]

    async def build(self, user: str | None, *, now: datetime | None = None) -> Overview:
        briefs = await self.briefs(user)
        moment = now or datetime.now(timezone.utc)
        return await asyncio.wait_for(asyncio.to_thread(self.read, briefs, moment), READ_TIMEOUT)

    def read(self, briefs: Iterable[ThreadBrief], now: datetime) -> Overview:
        """The blocking part (index and state files), for a worker thread; also what the benchmark times.

        Runs are sorted and counted from their index entries as stored; only the runs shown are
        validated and have their state read.
        """
        by_session = {b.session_id: b for b in briefs}
        entries = self.runs.store.entries_of_sessions(by_session)
        for brief in by_session.values():  # runs whose record predates session ids
            for run_id in brief.run_ids:
                if run_id not in entries and (found := self.runs.store.read_record(run_id)) is not None:
                    entries[run_id] = {**found.model_dump(mode="json"), "session_id": brief.session_id}
        since_monday = week_start(now).strftime("%Y-%m-%dT%H:%M:%S")
        sections: dict[str, list[tuple[str, str]]] = {"waiting": [], "active": [], "done": []}
        overview = Overview()
        for run_id, entry in entries.items():
            if entry.get("parent_run_id") or entry.get("session_id") not in by_session:
                continue  # a sub-workflow's run shows through its caller
            updated = str(entry.get("updated_at") or "")
            sections[section_of(str(entry.get("phase")), bool(entry.get("paused")))].append((updated, run_id))
            overview.runs_total += 1
            if updated >= since_monday:  # ISO stamps in UTC compare as text
                overview.tokens_this_week += _tokens(entry)
        waiting = sorted(sections["waiting"])  # the longest wait first
        active = sorted(sections["active"], reverse=True)
        done = sorted(sections["done"], reverse=True)

        def lines(chosen: list[tuple[str, str]]) -> list[RunLine]:
            records = RunRecord.valid_entries({run_id: entries[run_id] for _, run_id in chosen})
            return [
                self.line(records[run_id], by_session[str(records[run_id].session_id)])
                for _, run_id in chosen
                if run_id in records
            ]

        overview.waiting = lines(waiting[:WAITING_SHOWN])
        overview.active = lines(active[:ACTIVE_SHOWN])
        overview.done = lines(done[:DONE_SHOWN])
        overview.more_waiting = max(0, len(waiting) - WAITING_SHOWN)
        overview.more_active = max(0, len(active) - ACTIVE_SHOWN)
        overview.more_done = max(0, len(done) - DONE_SHOWN)
        return overview

    def line(self, record: RunRecord, brief: ThreadBrief) -> RunLine:
        package = self.package_of(brief.binding, record.package_id)
        base = RunLine(
            run_id=record.run_id,
            key=brief.key,
            owner=brief.owner,
            workflow=record.workflow_id,
            agent=record.active_agent_id,
            phase=record.phase,
            paused=record.paused,
            since=parse_stamp(record.updated_at),
            tokens=record.usage.total_tokens,
            tokens_estimated=bool(record.usage.estimated_calls),
            branch=record.worktree.branch if record.worktree else None,
            pull_request_url=record.delivery.pull_request_url if record.delivery else None,
            pushed=record.delivery is not None,
            error=record.last_error.message if record.last_error and record.phase is RunPhase.FAILED else None,
        )
        if package is None:
            return base
        snapshot = self.runs.snapshot(record, package)
        question = None
        if record.phase is RunPhase.WAITING_USER and not record.paused:
            question = self.question(record, brief)
        chain = snapshot.chain()
        return replace(
            base,
            workflow=snapshot.workflow_name,
            agent=snapshot.run_agent_name or snapshot.agent_name,
            steps_done=snapshot.steps_done,
            steps_total=snapshot.steps_total,
            step=" › ".join(s.current_node_title for s in chain if s.current_node_title) or None,
            artifacts=len(snapshot.artifacts),
            question=_clip(question) if question else None,
        )

    def question(self, record: RunRecord, brief: ThreadBrief) -> str | None:
        """The pending question: the thread's open widget, else what the model last asked (its log)."""
        asking = self.runs.asking(record)
        if brief.widget_message and brief.widget_run_id in (record.run_id, asking.run_id):
            return brief.widget_message
        try:
            return History.peek(self.runs.store.conversation_log(asking)).pending_question()
        except (OSError, ValueError):
            return None


def _clip(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= QUESTION_CHARS else flat[: QUESTION_CHARS - 1].rstrip() + "…"
