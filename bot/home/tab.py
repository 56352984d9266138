"""The Home tab (and the `/crew runs` answer) drawn from an Overview, with slack_sdk's Block Kit models.

Slack takes at most 100 blocks in a Home view (50 in a message); every run is one block, so the
runs that do not fit are counted in an "and N more" line instead of being dropped silently.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View

from crewagent.core.api.events import RunPhase

from ..render.mrkdwn import escape
from ..base.thread import ThreadKey
from .overview import Overview, RunLine

VIEW_BLOCKS = 100  # Slack's limit for a Home tab view
MESSAGE_BLOCKS = 50  # and for a message
SCOPE_ACTION = "crew:home:scope"  # the admin's "all runs / my runs" switch
OPEN_ACTION = "crew:home:open"  # "Open thread" link buttons (Slack still sends their clicks)
SECTION_TEXT = 3000


@dataclass(frozen=True)
class AgentEntry:
    """An agent someone can start, and where."""

    key: str  # what `/crew KEY` picks
    name: str
    title: str
    icon: str
    triggers: tuple[str, ...]  # its workflow items' triggers
    where: str = ""  # "" for every channel, else the channel it is bound to (mrkdwn)


@dataclass(frozen=True)
class HomeContext:
    """Who the view is for and how to draw it."""

    user: str
    everyone: bool = False  # an admin looking at all runs
    admin: bool = False
    workspace_url: str = "https://slack.com/"
    now: datetime | None = None


def thread_link(workspace_url: str, key: ThreadKey) -> str:
    """The thread's root message: Slack opens it with its replies."""
    return f"{workspace_url.rstrip('/')}/archives/{key.channel}/p{key.thread_ts.replace('.', '')}"


def waited(since: datetime, now: datetime) -> str:
    seconds = max(0, int((now - since).total_seconds()))
    if seconds < 60:
        return "less than a minute"
    if seconds < 3600:
        return _plural(seconds // 60, "min")
    if seconds < 2 * 86400:
        return _plural(seconds // 3600, "hour")
    return _plural(seconds // 86400, "day")


def _plural(n: int, unit: str) -> str:
    return f"{n} {unit}" if unit == "min" or n == 1 else f"{n} {unit}s"


def where(key: ThreadKey, owner: str | None, ctx: HomeContext) -> str:
    if key.is_dm:
        return "your DM with me" if owner == ctx.user else f"a DM of <@{owner}>"
    return f"<#{key.channel}>"


def _title(line: RunLine, ctx: HomeContext) -> str:
    head = f"*{escape(line.workflow)}* · {escape(line.agent)} · {where(line.key, line.owner, ctx)}"
    if ctx.everyone and line.owner and line.owner != ctx.user:
        head += f" · <@{line.owner}>"
    return head


def _tokens(line: RunLine) -> str:
    return f"{'~' if line.tokens_estimated else ''}{line.tokens:,} tokens"


def waiting_text(line: RunLine, ctx: HomeContext, now: datetime) -> str:
    if line.phase is RunPhase.FAILED:
        reason = escape(line.error or "the run stopped with an error")
        body = f"Failed: {reason}\nPress Retry in the thread, or type `*resume` there."
    else:
        question = escape(line.question) if line.question else "It asked you something in the thread."
        body = f"> {question}"
    return f"{_title(line, ctx)}\n{body}\n_Waiting {waited(line.since, now)}_"


def active_text(line: RunLine, ctx: HomeContext, now: datetime) -> str:
    state = "Paused" if line.paused or line.phase is RunPhase.WAITING_USER else "Running"
    progress = f"step {min(line.steps_done + 1, line.steps_total)}/{line.steps_total}" if line.steps_total else ""
    step = f": {escape(line.step)}" if line.step else ""
    detail = " · ".join(p for p in (state, f"{progress}{step}".strip()) if p)
    return f"{_title(line, ctx)}\n{detail} · _{waited(line.since, now)} ago_"


def done_text(line: RunLine, ctx: HomeContext, now: datetime) -> str:
    parts = [f"{line.artifacts} artifact{'s' if line.artifacts != 1 else ''}", _tokens(line)]
    if line.branch:
        parts.append(f"branch `{escape(line.branch)}`" + (" (pushed)" if line.pushed else ""))
    if line.pull_request_url:
        parts.append(f"<{line.pull_request_url}|Open a pull request>")
    return f"{_title(line, ctx)}\n{' · '.join(parts)} · _completed {waited(line.since, now)} ago_"


def run_block(text: str, line: RunLine, ctx: HomeContext) -> SectionBlock:
    button = ButtonElement(
        text="Open thread",
        action_id=f"{OPEN_ACTION}:{line.run_id[:8]}",
        url=thread_link(ctx.workspace_url, line.key),
    )
    return SectionBlock(text=MarkdownTextObject(text=text[:SECTION_TEXT]), accessory=button)


def _context(text: str) -> ContextBlock:
    return ContextBlock(elements=[MarkdownTextObject(text=text)])


def _heading(text: str) -> SectionBlock:
    return SectionBlock(text=MarkdownTextObject(text=text))


HOW_TO = (
    "*How to start a run*\n"
    "1. In a channel, type `/crew` (or mention `@crew`): I open a thread with the agents as buttons.\n"
    "2. Pick an agent, then a menu item; `/crew sm` or `/crew create-story` goes straight there.\n"
    "3. When the run needs you, its question appears in the thread (and here): reply in the thread.\n"
    "`/crew runs` lists your runs anywhere; `/crew help` explains the rest."
)


def agents_blocks(agents: Sequence[AgentEntry]) -> list[Block]:
    if not agents:
        return []
    lines = []
    for agent in agents:
        triggers = ", ".join(f"`{escape(t)}`" for t in agent.triggers[:6])
        line = f"{agent.icon} *{escape(agent.name)}* ({escape(agent.title)}) — `/crew {escape(agent.key)}`"
        if triggers:
            line += f" · {triggers}"
        if agent.where:
            line += f" · in {agent.where}"
        lines.append(line)
    blocks: list[Block] = [_heading("*Agents you can start*")]
    chunk: list[str] = []
    for line in lines:  # sections of at most 3000 characters
        if chunk and len("\n".join([*chunk, line])) > SECTION_TEXT:
            blocks.append(_heading("\n".join(chunk)))
            chunk = []
        chunk.append(line[:SECTION_TEXT])
    blocks.append(_heading("\n".join(chunk)))
    return blocks


def run_blocks(overview: Overview, ctx: HomeContext, budget: int) -> list[Block]:
    """The three run sections within `budget` blocks, each run one block, the rest counted."""
    now = ctx.now or datetime.now(timezone.utc)
    whose = "" if ctx.everyone else "you"
    sections = [
        (f"*Waiting for {whose or 'someone'}*", overview.waiting, overview.more_waiting, waiting_text),
        ("*Running and paused*", overview.active, overview.more_active, active_text),
        ("*Recently completed*", overview.done, overview.more_done, done_text),
    ]
    shown = [s for s in sections if s[1]]
    fixed = 3 * len(shown)  # heading, divider, and a possible "and N more" per section
    room = max(0, budget - fixed)
    blocks: list[Block] = []
    for heading, lines, more, text_of in shown:
        take = min(len(lines), room)
        room -= take
        blocks.append(DividerBlock())
        blocks.append(_heading(f"{heading} ({len(lines) + more})"))
        blocks += [run_block(text_of(line, ctx, now), line, ctx) for line in lines[:take]]
        hidden = len(lines) - take + more
        if hidden:
            blocks.append(_context(f"and {hidden} more"))
    return blocks


def overview_blocks(
    overview: Overview, agents: Sequence[AgentEntry], ctx: HomeContext, *, max_blocks: int, switch: bool
) -> list[Block]:
    title = "All runs" if ctx.everyone else "Your runs"
    head: list[Block] = [HeaderBlock(text=title)]
    if switch and ctx.admin:
        label, value = ("Show only my runs", "mine") if ctx.everyone else ("Show all runs", "all")
        head.append(ActionsBlock(elements=[ButtonElement(text=label, action_id=SCOPE_ACTION, value=value)]))
    week = f"Model tokens this week: *{overview.tokens_this_week:,}*"
    head.append(_context(f"{week} · {overview.runs_total} run{'s' if overview.runs_total != 1 else ''} in all"))
    tail: list[Block] = [DividerBlock(), *agents_blocks(agents)] if agents else []
    if overview.empty and not ctx.everyone:
        head.append(_heading("You have no runs yet."))
        tail.append(_heading(HOW_TO))
    elif overview.empty:
        head.append(_heading("No runs yet."))
    tail = tail[: max(0, max_blocks - len(head) - 4)]  # a huge agent list never pushes the runs out entirely
    body = run_blocks(overview, ctx, max_blocks - len(head) - len(tail))
    return (head + body + tail)[:max_blocks]


@dataclass(frozen=True)
class Undelivered:
    """A message for one of the viewer's threads that Slack never took (the outbox gave it up)."""

    key: ThreadKey
    text: str
    reason: str


UNDELIVERED_SHOWN = 10


def undelivered_blocks(missed: Sequence[Undelivered]) -> list[Block]:
    """Two blocks: a heading and the messages (thread, their start, why), newest last."""
    if not missed:
        return []
    rows = [
        f"• <#{m.key.channel}> thread {m.key.thread_ts}: “{escape(m.text[:120])}” ({escape(m.reason)})"
        for m in missed[-UNDELIVERED_SHOWN:]
    ]
    more = len(missed) - UNDELIVERED_SHOWN
    if more > 0:
        rows.append(f"and {more} more")
    return [_heading("*Messages Slack did not take*"), SectionBlock(text=MarkdownTextObject(text="\n".join(rows)[:SECTION_TEXT]))]


def home_view(
    overview: Overview,
    agents: Sequence[AgentEntry],
    ctx: HomeContext,
    *,
    max_blocks: int = VIEW_BLOCKS,
    missed: Sequence[Undelivered] = (),
) -> View:
    extra = undelivered_blocks(missed)
    blocks = overview_blocks(overview, agents, ctx, max_blocks=max_blocks - len(extra), switch=True)
    scope = "all" if ctx.everyone else "mine"
    return View(type="home", blocks=[*blocks[:1], *extra, *blocks[1:]], private_metadata=scope)


def refusal_view(reason: str) -> View:
    """The Home tab of someone who may not use the bot: why, and nothing else."""
    return View(type="home", blocks=[HeaderBlock(text="CrewAgent"), _heading(escape(reason))])


def fallback_text(overview: Overview) -> str:
    """The notification text of a `/crew runs` answer."""
    return (
        f"{len(overview.waiting) + overview.more_waiting} waiting for you, "
        f"{len(overview.active) + overview.more_active} running or paused, "
        f"{len(overview.done) + overview.more_done} recently completed."
    )
