"""Slack's agent session of a thread: `processing` while the bot works (Slack shows its own Stop then),
`active` while it waits for the person, `closed` once the conversation is dismissed, and its name.

Each change must arrive in order (a thread that is asked a question must not be left `processing`, a
session is named once it exists), so a thread's changes go through one sender key, each a milestone of
its own, within the methods' Tier 3 budget. A workspace that refuses the methods (`not_allowed`,
`unknown_method`, a missing scope) is remembered for the rest of the process and logged once: its
threads work as before. Any other failure (a 5xx, a 429, a thread Slack does not know) drops that one
change; the next one is tried as usual.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Literal

from ..base.thread import ThreadKey
from ..outgoing import SessionChange
from ..slack_port import SlackPort
from ..slack_send import CallBudget, Priority
from .fallbacks import Fallbacks, error_code

SessionStatus = Literal["processing", "active", "closed"]
SESSIONS = "agent_sessions"  # the Fallbacks feature name, kept per workspace
CALLS_PER_MINUTE = 50.0  # agents.sessions.* are Tier 3
BURST = 5
TITLE_LIMIT = 80  # characters of a session title
STREAM_GRACE = 1.0  # seconds after a finished stream before the session is set `processing` again
KEPT_THREADS = 5000  # threads whose last status is remembered (to send a change only)
# What Slack answers a workspace, plan or token that cannot use the methods at all.
REFUSALS = frozenset(
    {"not_allowed", "unknown_method", "missing_scope", "not_allowed_token_type", "method_deprecated",
     "feature_not_enabled", "team_access_not_granted", "no_permission"}
)


def session_title(text: str) -> str:
    """A session title from what was typed: its first line, shortened."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= TITLE_LIMIT else line[: TITLE_LIMIT - 1].rstrip() + "…"


class AgentSessions:
    def __init__(self, io: SlackPort, fallbacks: Fallbacks) -> None:
        self.io, self.fallbacks = io, fallbacks
        self.sender = io.pacer("agents.sessions", budget=CallBudget(CALLS_PER_MINUTE, BURST), reserve=1)
        self._status: OrderedDict[ThreadKey, SessionStatus] = OrderedDict()

    def processing(self, key: ThreadKey, *, title: str | None = None) -> None:
        """The bot started working in the thread; `title` names a session Slack creates now."""
        self._set(key, "processing", title=session_title(title) if title else None)

    def waiting(self, key: ThreadKey) -> None:
        """The bot waits for the person: a session it marked `processing` becomes `active`."""
        if self._status.get(key) == "processing":
            self._set(key, "active")

    def streamed(self, key: ThreadKey) -> None:
        """A streamed reply ended, which leaves Slack's session `active`: while the bot still works, it is
        `processing` again, a moment later, so that a call ending with its reply sends only `active`."""
        if self._status.get(key) == "processing":
            self._set(key, "processing", force=True, refresh=True)

    def stopped(self, key: ThreadKey) -> None:
        """Slack's Stop was pressed: the session leaves `processing` at once, whatever this process knew."""
        self._set(key, "active", force=True)

    def closed(self, key: ThreadKey) -> None:
        """The conversation was dismissed."""
        self._set(key, "closed")

    def rename(self, key: ThreadKey, title: str | None) -> None:
        """Name the session after what runs in it."""
        if not title or not self._allowed(key):
            return
        name = session_title(title)

        async def send() -> bool:
            return await self._call(key, SessionChange(key.channel, key.thread_ts, title=name))

        self.sender.put(key, send, priority=Priority.BACKGROUND, milestone=f"title:{name}")

    def _set(
        self, key: ThreadKey, status: SessionStatus, *, title: str | None = None, force: bool = False,
        refresh: bool = False,
    ) -> None:
        if not self._allowed(key) or (self._status.get(key) == status and not force and title is None):
            return
        self._status[key] = status
        self._status.move_to_end(key)
        while len(self._status) > KEPT_THREADS:
            self._status.popitem(last=False)

        async def send() -> bool:
            return await self._call(key, SessionChange(key.channel, key.thread_ts, status=status, title=title))

        priority = Priority.LIVE if status == "processing" else Priority.URGENT
        if refresh:  # replaced by any change put before it is due
            self.sender.put(key, send, priority=priority, not_before=time.monotonic() + STREAM_GRACE)
        else:
            self.sender.put(key, send, priority=priority, milestone=status)

    def _allowed(self, key: ThreadKey) -> bool:
        return self.fallbacks.allows(_workspace(key), SESSIONS)

    async def _call(self, key: ThreadKey, change: SessionChange) -> bool:
        if not self._allowed(key):
            return False
        delivery = await self.io.send(change)
        if delivery.error is not None and error_code(delivery.error) in REFUSALS:
            self.fallbacks.fall_back(_workspace(key), SESSIONS, error_code(delivery.error))
        return not delivery.fenced

    async def idle(self, timeout: float | None = None) -> bool:
        """True once every change wanted now has been sent."""
        return await self.sender.idle(timeout)

    async def close(self) -> None:
        await self.sender.close()


def _workspace(key: ThreadKey) -> str:
    return f"workspace:{key.team}"
