"""Publishing the Home tab: when someone opens it, and again when one of their runs changes phase.

Refreshes are coalesced: a person's view is published at most once per `interval` however many of
their runs move, and all publishes share one pace (`rate` per second, well inside the Tier 4 limit
of `views.publish`). Only people who opened the tab recently are refreshed (remembered in the
thread store, so every replica knows). A view Slack refuses as too large is sent again with fewer
blocks, one refused for the rate limit (after the SDK's own retries) is sent again later; both are
logged, never shown to the person.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from slack_sdk.errors import SlackApiError

from ..native.fallbacks import error_code
from ..outgoing import HomeView
from ..slack_port import SlackPort
from ..waits import wait_set
from ..base.thread import ThreadKey, ThreadRecord
from .overview import Access, RunOverview
from .tab import VIEW_BLOCKS, AgentEntry, HomeContext, Undelivered, home_view, refusal_view

log = logging.getLogger(__name__)

REFRESH_INTERVAL = 10.0  # seconds between two refreshes of one person's view
PUBLISH_RATE = 1.0  # publishes per second, for every person together (Tier 4: 100+ a minute)
RATE_LIMITED_DELAY = 30.0  # seconds before a view Slack refused for the rate limit is sent again
TOO_LARGE = frozenset({"invalid_arguments", "invalid_blocks", "too_many_blocks", "view_too_large"})
CLOSE_WAIT = 5.0  # seconds close() lets viewer checks finish
SMALLEST = 4  # blocks: a refused view this small is given up (and logged)


VIEWER_WINDOW = 3600.0  # seconds after opening the tab during which a person's view is kept fresh


class HomeViewers(Protocol):
    """Who opened the Home tab lately, shared by every replica (the thread store keeps it). Not a
    delivery: nothing here is deduplicated, the tab is only refreshed for people who look at it."""

    async def home_opened(self, user: str) -> None: ...

    async def home_viewer(self, user: str, since: float) -> bool: ...


class HomePublisher:
    def __init__(
        self,
        port: SlackPort,
        overview: RunOverview,
        agents: Callable[[], Sequence[AgentEntry]],
        access: Access,
        viewers: HomeViewers,
        *,
        interval: float = REFRESH_INTERVAL,
        rate: float = PUBLISH_RATE,
        retry_delay: float = RATE_LIMITED_DELAY,
    ) -> None:
        self.port = port
        self.overview = overview
        self.agents = agents
        self.access = access
        self.viewers = viewers
        self.interval = interval
        self.rate = rate
        self.retry_delay = retry_delay
        # Messages for the viewer's threads that Slack never took (the outbox's), shown at the top.
        self.undelivered: Callable[[str], Awaitable[Sequence[tuple[ThreadKey, str, str]]]] | None = None
        self.everyone: set[str] = set()  # admins looking at all runs
        self._due: dict[str, float] = {}  # person -> when their view should go out
        self._last: dict[str, float] = {}  # person -> when it last went out
        self._checking: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._sender: asyncio.Task[None] | None = None
        self._workspace_url: str | None = None
        self._closed = False

    # ---- what happened ---------------------------------------------------------------

    async def opened(self, user: str, scope: str | None) -> None:
        """`user` opened the Home tab; `scope` is what the view they see shows ("all" or "mine")."""
        if self.access.is_admin(user) and scope in ("all", "mine"):
            self._scope(user, scope == "all")
        await self.viewers.home_opened(user)
        self.schedule(user, urgent=True)

    def switch(self, user: str, scope: str) -> None:
        """An admin pressed "Show all runs" / "Show only my runs"."""
        if self.access.is_admin(user):
            self._scope(user, scope == "all")
            self.schedule(user, urgent=True)

    def _scope(self, user: str, everyone: bool) -> None:
        if everyone:
            self.everyone.add(user)
        else:
            self.everyone.discard(user)

    def run_changed(self, record: ThreadRecord) -> None:
        """A run of this thread changed phase: its owner's view (if they look at it) and admins' all-runs views."""
        owner = record.session.owner
        for admin in self.everyone:
            self.schedule(admin)
        if owner and owner not in self.everyone and not self._closed:
            task = asyncio.create_task(self._if_viewer(owner), name=f"home-check:{owner}")
            self._checking.add(task)
            task.add_done_callback(self._checking.discard)

    async def _if_viewer(self, user: str) -> None:
        try:
            looking = await self.viewers.home_viewer(user, time.time() - VIEWER_WINDOW)
        except Exception:
            log.warning("could not tell whether %s has the Home tab open", user, exc_info=True)
            return
        if looking:
            self.schedule(user)

    # ---- pacing ------------------------------------------------------------------------

    def schedule(self, user: str, *, urgent: bool = False, delay: float = 0.0) -> None:
        """Publish `user`'s view soon: at once when `urgent`, else not before `interval` after the last one."""
        if self._closed:
            return
        now = time.monotonic()
        due = now + delay if urgent or delay else max(now, self._last.get(user, 0.0) + self.interval)
        self._due[user] = min(self._due.get(user, due), due)
        self._wake.set()
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_loop(), name="home-publisher")

    async def _send_loop(self) -> None:
        while self._due and not self._closed:
            user, due = min(self._due.items(), key=lambda item: item[1])
            wait = due - time.monotonic()
            if wait > 0:
                self._wake.clear()
                await wait_set(self._wake, wait)
                continue
            del self._due[user]
            self._last[user] = time.monotonic()
            try:
                await self.publish(user)
            except Exception:
                log.exception("home view of %s not published", user)
            await asyncio.sleep(1.0 / self.rate if self.rate > 0 else 0)

    async def idle(self, timeout: float | None = None) -> bool:
        """True once nothing is waiting to be published (for tests and shutdown)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._due or self._checking or (self._sender is not None and not self._sender.done()):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(0.02)
        return True

    async def close(self) -> None:
        """Stop publishing. Viewer checks in flight are let finish (briefly): their store call runs in a
        worker thread that cancelling would not stop, and the store closes right after this."""
        self._closed = True
        self._due.clear()
        if self._checking:
            await asyncio.wait(list(self._checking), timeout=CLOSE_WAIT)
        tasks = [*self._checking, *([self._sender] if self._sender else [])]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- publishing ---------------------------------------------------------------------

    async def workspace_url(self) -> str:
        """The workspace's address, for thread links (asked once)."""
        if self._workspace_url is None:
            self._workspace_url = await self.port.workspace_url()
        return self._workspace_url or "https://slack.com/"

    async def context(self, user: str) -> HomeContext:
        everyone = user in self.everyone and self.access.is_admin(user)
        return HomeContext(
            user=user, everyone=everyone, admin=self.access.is_admin(user), workspace_url=await self.workspace_url()
        )

    async def publish(self, user: str) -> bool:
        """Build and publish `user`'s Home view; smaller when Slack finds it too large, later when rate limited."""
        verdict = self.access.may_use(user, "", is_dm=True)
        ctx = await self.context(user)
        overview = await self.overview.build(None if ctx.everyone else user) if verdict.allowed else None
        agents = self.agents()
        missed = [Undelivered(*m) for m in await self.undelivered(user)] if self.undelivered and overview else []
        max_blocks = VIEW_BLOCKS
        while True:
            if overview is None:
                view = refusal_view(verdict.reason)
            else:
                view = home_view(overview, agents, ctx, max_blocks=max_blocks, missed=missed)
            delivery = await self.port.send(HomeView(user, view))
            exc = delivery.error
            if exc is None:
                return delivery.sent
            if isinstance(exc, SlackApiError):
                code = error_code(exc)
                blocks = len(view.blocks or [])
                if code in TOO_LARGE and blocks > SMALLEST:
                    max_blocks = max(SMALLEST, blocks // 2)
                    log.info("home view refused; sending a smaller one", extra={"error": code, "blocks": blocks})
                    continue
                if code == "ratelimited":
                    log.info("home view rate limited; publishing it later", extra={"delay": self.retry_delay})
                    self.schedule(user, delay=self.retry_delay)
                    return False
                return False  # logged by the port
            self.schedule(user, delay=self.retry_delay)  # Slack could not answer now
            return False
