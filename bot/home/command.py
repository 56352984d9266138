"""`/crew`: open a thread with the agent picker from any channel, list your runs, or get help.

Slack wants a slash command acknowledged within 3 seconds, and Bolt acks only when the listener
returns (the app processes before responding). So the ack listener decides from memory alone
(access, the channel's agents) and answers refusals, help and unknown names in the ack itself,
privately. Work that calls Slack or the stores (posting the thread's first message, reading the
run list) runs in a Bolt lazy listener after the ack; its private answers go to `response_url`.

The thread is opened exactly as a mention opens one: the bot posts a message in the channel that
becomes the thread's root, and the command's text goes through the dispatcher's `on_text` with
the person who typed it as the sender, so they own the thread (and replicas queue it as usual).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, replace
from typing import Any, Literal

import aiohttp
from slack_sdk.errors import SlackApiError

from ..native.fallbacks import error_code
from ..outgoing import Post
from ..render.message import SlackMessage
from ..render.mrkdwn import escape
from ..slack_port import SlackPort
from ..threads.intake import ThreadIntake
from ..base.thread import ThreadKey
from .startable import agents_list
from .overview import Access
from .publish import HomePublisher
from .tab import MESSAGE_BLOCKS, fallback_text, overview_blocks

log = logging.getLogger(__name__)

COMMAND = "/crew"
HELP = (
    "*CrewAgent* runs BMAD agents and their workflows in Slack threads.\n"
    "• `/crew` — open a thread here with the agents as buttons (you own it: only you or an admin steer it).\n"
    "• `/crew AGENT` — open it with that agent (`/crew sm`, `/crew Bob`).\n"
    "• `/crew COMMAND` — start a menu command directly (`/crew create-story`).\n"
    "• `/crew runs` — your runs: waiting for you, running, recently completed.\n"
    "• `/crew help` — this note.\n"
    "In a thread, reply to answer the run's questions; type `*status`, `*pause`, `*stop`, `*resume` or `*menu`. "
    "The bot's *Home* tab shows your runs at a glance."
)
CANNOT_POST = {
    "not_in_channel": "I'm not a member of this channel. Invite me (`/invite @crew`), then try `/crew` again.",
    "channel_not_found": "I can't post in this conversation. Use `/crew` in a channel I'm in, or in my DM.",
    "is_archived": "This channel is archived, so I can't open a thread here.",
    "restricted_action": "This channel doesn't allow me to post, so I can't open a thread here.",
}
Kind = Literal["help", "refuse", "runs", "unknown", "open"]


@dataclass(frozen=True)
class Decision:
    kind: Kind
    reply: str = ""  # the private answer given with the ack (help, refusals, unknown names)
    everyone: bool = False  # `/crew runs all` by an admin


class CrewCommand:
    def __init__(
        self,
        *,
        access: Access,
        dispatcher: ThreadIntake,
        publisher: HomePublisher,
        port: SlackPort,
    ) -> None:
        self.access = access
        self.dispatcher = dispatcher
        self.publisher = publisher
        self.port = port

    def decide(self, command: dict[str, Any]) -> Decision:
        """What to do with a `/crew` delivery, from memory only (it runs before the ack)."""
        text = str(command.get("text") or "").strip()
        user, channel = str(command.get("user_id") or ""), str(command.get("channel_id") or "")
        word = text.split(maxsplit=1)[0].lower() if text else ""
        if word in ("help", "?"):
            return Decision("help", HELP)
        verdict = self.access.may_use(user, channel, is_dm=channel.startswith("D"))
        if not user or not channel:
            return Decision("refuse", "Slack didn't say who you are or where you typed this; please try again.")
        if not verdict.allowed:
            return Decision("refuse", verdict.reason)
        if word == "runs":
            everyone = text.lower().split()[1:] == ["all"] and self.access.is_admin(user)
            return Decision("runs", everyone=everyone)
        service = self.dispatcher.bindings.get(self.dispatcher.config.binding_name(channel)) or self.dispatcher.bindings["default"]
        if not service.service.names_something(text):
            return Decision(
                "unknown",
                f"I don't know an agent or command called `{escape(text)}` here. These agents are available:\n"
                f"{agents_list(service.service)}\nType `/crew` alone to pick one from buttons.",
            )
        return Decision("open")

    # ---- Bolt listeners ------------------------------------------------------------------

    async def ack(self, ack: Any, command: dict[str, Any]) -> None:
        decision = self.decide(command)
        if decision.reply:
            await ack(text=decision.reply, response_type="ephemeral")
        else:
            await ack()

    async def work(self, command: dict[str, Any], respond: Any, context: Any) -> None:
        """After the ack: open the thread, or answer `/crew runs` through response_url."""
        decision = self.decide(command)
        try:
            if decision.kind == "open":
                await self.open_thread(command, respond, str(getattr(context, "team_id", None) or ""))
            elif decision.kind == "runs":
                await self.list_runs(command, respond, everyone=decision.everyone)
        except Exception:
            log.exception("/crew %s from %s failed", decision.kind, command.get("user_id"))
            await _say(respond, "Something went wrong on my side with that command. Please try again.")

    async def open_thread(self, command: dict[str, Any], respond: Any, team: str) -> None:
        user, channel = str(command["user_id"]), str(command["channel_id"])
        text = str(command.get("text") or "").strip()
        team = str(command.get("team_id") or team or "T")
        name = str(command.get("user_name") or "Someone")
        typed = f"{COMMAND} {text}".strip()
        root = f"{escape(name)} asked for CrewAgent (`{escape(typed)}`); we continue in this thread."
        # Not durable: the person is told at once when Slack does not take it, and types it again.
        delivery = await self.port.send(Post(channel, None, SlackMessage(text=root), durable=False, shows_run=False))
        if delivery.ts is None:
            exc = delivery.error
            reason = CANNOT_POST.get(error_code(exc)) if isinstance(exc, SlackApiError) else None
            await _say(respond, reason or "Slack didn't let me post here just now; please try again in a minute.")
            return
        ts = delivery.ts
        key = ThreadKey(team, channel, ts)
        await self.dispatcher.on_text(key, user, text, ts, opening=True, dedupe=[f"cmd:{channel}:{ts}"])

    async def list_runs(self, command: dict[str, Any], respond: Any, *, everyone: bool) -> None:
        user = str(command["user_id"])
        ctx = await self.publisher.context(user)
        if everyone:
            ctx = replace(ctx, everyone=True)
        overview = await self.publisher.overview.build(None if everyone else user)
        blocks = overview_blocks(overview, [], ctx, max_blocks=MESSAGE_BLOCKS, switch=False)
        await respond(text=fallback_text(overview), blocks=[b.to_dict() for b in blocks], response_type="ephemeral")


async def _say(respond: Any, text: str) -> None:
    try:
        await respond(text=text, response_type="ephemeral")
    except (aiohttp.ClientError, asyncio.TimeoutError):
        log.warning("could not answer /crew privately", exc_info=True)
