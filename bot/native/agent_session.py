"""Slack's agent session of a thread: `processing` while the bot works (Slack shows its own Stop then),
`active` while it waits for the person, `closed` once the conversation is dismissed, and its name.

Only the newest status matters, but each change must arrive in order (a thread that is asked a question
must not be left `processing`), so every change goes through one sender as a milestone of its own,
within the methods' Tier 3 budget. A workspace that refuses the methods (`not_allowed`, an older plan,
a missing scope) is remembered for the rest of the process and logged once: the thread works as before.
Slack may also answer for a moment that it cannot (a 5xx, a 429): that one change is dropped, and the
next one is tried as usual.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Literal

from slack_sdk.web.async_client import AsyncWebClient

from ..base.thread import ThreadKey
from ..slack_send import CallBudget, Priority, Sender
from .fallbacks import SLACK_FAILURES, Fallbacks, error_code

log = logging.getLogger(__name__)

SessionStatus = Literal["processing", "active", "closed"]
SESSIONS = "agent_sessions"  # the Fallbacks feature name, kept per workspace
CALLS_PER_MINUTE = 50.0  # agents.sessions.* are Tier 3
BURST = 5
TITLE_LIMIT = 80  # characters of a session title
KEPT_THREADS = 5000  # threads whose last status is remembered (to send a change only)


def session_title(text: str) -> str:
    """A session title from what was typed: its first line, shortened."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= TITLE_LIMIT else line[: TITLE_LIMIT - 1].rstrip() + "…"


class AgentSessions:
    def __init__(self, client: AsyncWebClient, fallbacks: Fallbacks) -> None:
        self.client, self.fallbacks = client, fallbacks
        self.sender = Sender("agents.sessions", budget=CallBudget(CALLS_PER_MINUTE, BURST), reserve=1)
        self._status: OrderedDict[ThreadKey, SessionStatus] = OrderedDict()

    def processing(self, key: ThreadKey, *, title: str | None = None) -> None:
        """The bot started working in the thread; `title` names a session Slack creates now."""
        self._set(key, "processing", title=session_title(title) if title else None)

    def waiting(self, key: ThreadKey) -> None:
        """The bot waits for the person: a session it marked `processing` becomes `active`."""
        if self._status.get(key) == "processing":
            self._set(key, "active")

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
            return await self._call(key, "agents_sessions_rename", title=name)

        self.sender.put((key, "title"), send, priority=Priority.BACKGROUND)

    def _set(self, key: ThreadKey, status: SessionStatus, *, title: str | None = None, force: bool = False) -> None:
        if not self._allowed(key) or (self._status.get(key) == status and not force and title is None):
            return
        self._status[key] = status
        self._status.move_to_end(key)
        while len(self._status) > KEPT_THREADS:
            self._status.popitem(last=False)

        async def send() -> bool:
            return await self._call(key, "agents_sessions_setStatus", status=status, title=title)

        priority = Priority.LIVE if status == "processing" else Priority.URGENT
        self.sender.put((key, "status"), send, priority=priority, milestone=status)

    def _allowed(self, key: ThreadKey) -> bool:
        return self.fallbacks.allows(_workspace(key), SESSIONS)

    async def _call(self, key: ThreadKey, method: str, **arguments: str | None) -> bool:
        if not self._allowed(key):
            return False
        call = getattr(self.client, method)
        try:
            await call(channel_id=key.channel, thread_ts=key.thread_ts, **arguments)
        except SLACK_FAILURES as exc:
            if not self.fallbacks.fall_back(_workspace(key), SESSIONS, exc):
                log.debug("agent session call failed for now", extra={"method": method, "error": error_code(exc)})
        return True

    async def idle(self, timeout: float | None = None) -> bool:
        """True once every change wanted now has been sent."""
        return await self.sender.idle(timeout)

    async def close(self) -> None:
        await self.sender.close()


def _workspace(key: ThreadKey) -> str:
    return f"workspace:{key.team}"
