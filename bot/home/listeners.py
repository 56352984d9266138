"""Bolt listeners of the Home tab and `/crew`. Bolt runs only the first listener that matches: the
`app_home_opened` here matches the Home tab only (the messages tab's is bot.serve.handlers')."""

from __future__ import annotations

import re
from typing import Any

from slack_bolt.async_app import AsyncApp

from .command import COMMAND, CrewCommand
from .publish import HomePublisher
from .tab import OPEN_ACTION, SCOPE_ACTION


async def _home_tab(event: dict[str, Any]) -> bool:
    return event.get("tab") == "home"


class HomeListeners:
    def __init__(self, publisher: HomePublisher, command: CrewCommand) -> None:
        self.publisher = publisher
        self.command = command

    def register(self, app: AsyncApp) -> None:
        app.event("app_home_opened", matchers=[_home_tab])(self.home_opened)
        app.action(SCOPE_ACTION)(self.switch_scope)
        app.action(re.compile(rf"^{re.escape(OPEN_ACTION)}:"))(self.link_clicked)
        app.command(COMMAND)(ack=self.command.ack, lazy=[self.command.work])

    async def home_opened(self, event: dict[str, Any]) -> None:
        """Acked once this returns: the view itself is built and published by the publisher's own task."""
        user = str(event.get("user") or "")
        if not user:
            return
        view = event.get("view") or {}
        scope = str(view.get("private_metadata") or "") if isinstance(view, dict) else ""
        await self.publisher.opened(user, scope or None)

    async def switch_scope(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        await ack()
        user = str((body.get("user") or {}).get("id") or "")
        if user:
            self.publisher.switch(user, str(action.get("value") or "mine"))

    async def link_clicked(self, ack: Any) -> None:
        """"Open thread" is a link: Slack opens it and still tells the app; nothing else to do."""
        await ack()
