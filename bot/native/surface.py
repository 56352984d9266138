"""What a thread's renderer needs for Slack's agent surfaces: streams, the status line, the plan, titles.

One instance per bot, shared by every thread; the per-thread pieces (a reply stream) are made
from it by the renderer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from crewagent.core.api.packages import Graph
from crewagent.core.api.runs import RunSnapshot

from .fallbacks import TITLE, Fallbacks
from ..outgoing import Title
from ..render.plan import PlanBook
from ..slack_port import SlackPort
from ..slack_send import CallBudget
from ..status import StatusBoard
from .agent_session import AgentSessions
from .status_line import StatusLines
from .stream import ReplyStream, ReplyTarget
from ..base.thread import ThreadKey, ThreadRecord

# A run's workflow graph and a way to name its agents, for the plan (None: the package is gone).
PlanSource = Callable[[ThreadRecord, RunSnapshot], tuple[Graph, Callable[[str | None], str]] | None]

APPEND_PER_MINUTE = 100.0  # chat.appendStream is Tier 4: 100+ per minute per workspace
APPEND_BURST = 20


@dataclass
class AgentSurface:
    io: SlackPort
    board: StatusBoard
    lines: StatusLines
    sessions: AgentSessions  # Slack's agent session of each thread: processing, active, closed, its name
    fallbacks: Fallbacks
    plan_source: PlanSource
    stop_run: Callable[[str], object]
    stream_interval: float = 1.0
    # What the surface keeps for every thread: the plans drawn, and the workspace's budget of stream appends.
    plans: PlanBook = field(default_factory=PlanBook, init=False)
    append_budget: CallBudget = field(default_factory=lambda: CallBudget(APPEND_PER_MINUTE, APPEND_BURST), init=False)

    async def idle(self, timeout: float | None = None) -> bool:
        """True once the status lines and the agent sessions have sent what they hold."""
        return await self.lines.idle(timeout) and await self.sessions.idle(timeout)

    async def close(self) -> None:
        await self.lines.close()
        await self.sessions.close()

    def reply_stream(self, target: ReplyTarget, run_id: str | None) -> ReplyStream:
        stop = (lambda: self.stop_run(run_id)) if run_id else None
        return ReplyStream(
            io=self.io,
            board=self.board,
            fallbacks=self.fallbacks,
            budget=self.append_budget,
            target=target,
            interval=self.stream_interval,
            on_user_stop=stop,
        )

    async def set_title(self, key: ThreadKey, title: str | None) -> None:
        """Name a DM thread in the agent view; channels have no thread titles."""
        if not title or not key.is_dm or not self.fallbacks.allows(str(key), TITLE):
            return
        delivery = await self.io.send(Title(key.channel, key.thread_ts, title))
        if delivery.error is not None:
            self.fallbacks.fall_back(str(key), TITLE, delivery.error)
