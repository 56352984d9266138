"""Bolt listeners: turn Slack payloads into thread work, fast.

Bolt acks once these return (process_before_response), so an event is queued, in the thread's
order, before Slack hears it arrived. A listener that raises (the event could not be recorded)
gets no ack: HTTP 500, or no Socket Mode ack, and Slack delivers the event again (its event id
keeps the redelivery from being handled twice once one of them is recorded). Nothing here waits
on the model: work is queued for the thread (see bot/threads/intake.py). Clicks, menu choices and
form submissions call `ack` themselves, after the work is queued, so they are acknowledged once
recorded too.

Which event handles what (Slack sends both `app_mention` and `message` for one mention):
- top-level mention in a channel → `app_mention` only (top-level channel messages are ignored);
- anything in a DM → `message` only (DMs need no mention);
- thread replies → `message`; a mention inside a thread may arrive through either, and the inbox
  keeps one row per message (channel + ts): whichever comes first is queued, the other is only acked.
"""

from __future__ import annotations

import re
from typing import Any

from slack_bolt.async_app import AsyncApp
from slack_sdk.models.blocks import MarkdownTextObject, PlainTextObject, SectionBlock
from slack_sdk.models.views import View

from ..base import actions as act
from ..base.actions import ButtonValue, Clicked
from ..native.agent_view import PROMPTS_TITLE, PromptPacer
from ..threads.intake import ThreadIntake
from ..render.modals import decode_context, parse_submission
from ..outgoing import SuggestedPrompts
from ..slack_port import SlackPort
from ..base.thread import ThreadKey

_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
# Plain user messages; thread_broadcast is a reply also shown in the channel, file_share a message with a file.
_USER_SUBTYPES = frozenset({None, "thread_broadcast", "file_share"})


def strip_mentions(text: str, bot_user_id: str | None) -> str:
    """Remove mentions of the bot (and only the bot) and surrounding blanks."""
    if not bot_user_id:
        return text.strip()
    return _MENTION.sub(lambda m: "" if m.group(1) == bot_user_id else m.group(0), text).strip()


async def _messages_tab(event: dict[str, Any]) -> bool:
    return event.get("tab") == "messages"  # the Home tab's opening is bot.home's


def _team(body: dict[str, Any], event: dict[str, Any], context: Any) -> str:
    return str(body.get("team_id") or event.get("team") or getattr(context, "team_id", None) or "T")


class Handlers:
    def __init__(self, intake: ThreadIntake, port: SlackPort) -> None:
        self.intake = intake
        self.port = port
        self.pacer = PromptPacer()

    def register(self, app: AsyncApp) -> None:
        """Bolt tries each listener's matchers in the order they were registered, and each try builds the
        arguments its matchers take: the listeners of thread messages, most of what a bot receives, go first."""
        app.event("message")(self.message)
        app.event("app_mention")(self.app_mention)
        app.event("app_home_opened", matchers=[_messages_tab])(self.app_home_opened)
        app.event("agent_session_stopped")(self.agent_session_stopped)
        for kind in act.CLICKS:
            app.action(act.pattern(kind))(self.click)
        for kind in act.SELECTS:
            app.action(act.pattern(f"{kind}_select"))(self.select)
        app.view(act.FORM_CALLBACK)(self.view_submission)

    # ---- events -------------------------------------------------------------------

    async def app_home_opened(self, event: dict[str, Any], context: Any) -> None:
        """Someone opened the bot's DM: offer its agents and most used workflows as suggested prompts."""
        offered = getattr(context, "set_suggested_prompts", None) is not None  # Bolt: a DM that takes prompts
        user = str(event.get("user") or "")
        if not offered or not user or not self.pacer.due(user):
            return
        channel = str(getattr(context, "channel_id", None) or event.get("channel") or "")
        prompts = await self.intake.suggested_prompts(channel)
        if prompts:  # a failure is logged by the port; the DM works without prompts
            await self.port.send(SuggestedPrompts(channel, getattr(context, "thread_ts", None), prompts, PROMPTS_TITLE))

    def _from_human(self, event: dict[str, Any], bot_user_id: str | None) -> bool:
        user = event.get("user")
        return bool(user) and not event.get("bot_id") and user != bot_user_id

    async def app_mention(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        bot_user_id = getattr(context, "bot_user_id", None)
        channel = str(event.get("channel") or "")
        if not channel or channel.startswith("D") or not self._from_human(event, bot_user_id):
            return
        ts = str(event.get("ts"))
        key = ThreadKey(_team(body, event, context), channel, str(event.get("thread_ts") or ts))
        await self._deliver(body, event, key, ts, bot_user_id, opening=True)

    async def message(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        bot_user_id = getattr(context, "bot_user_id", None)
        if event.get("subtype") not in _USER_SUBTYPES or not self._from_human(event, bot_user_id):
            return
        channel = str(event.get("channel") or "")
        ts = str(event.get("ts"))
        thread_ts = event.get("thread_ts")
        is_dm = event.get("channel_type") == "im" or channel.startswith("D")
        if not thread_ts or thread_ts == ts:
            if not is_dm:
                return  # a top-level mention comes as app_mention; other channel chatter is not ours
            key = ThreadKey(_team(body, event, context), channel, ts)
            await self._deliver(body, event, key, ts, bot_user_id, opening=True)
            return
        mentioned = bool(bot_user_id) and f"<@{bot_user_id}" in str(event.get("text") or "")
        key = ThreadKey(_team(body, event, context), channel, str(thread_ts))
        await self._deliver(body, event, key, ts, bot_user_id, opening=mentioned or is_dm)

    async def agent_session_stopped(self, body: dict[str, Any], event: dict[str, Any], context: Any) -> None:
        """Slack's own Stop on a thread's agent session: the thread's work stops as `*stop` would."""
        channel, thread_ts, user = (str(event.get(name) or "") for name in ("channel", "thread_ts", "user"))
        if not channel or not thread_ts or not user:
            return
        key = ThreadKey(_team(body, event, context), channel, thread_ts)
        dedupe = [f"ev:{body['event_id']}"] if body.get("event_id") else [f"stopped:{key}:{event.get('event_ts')}"]
        await self.intake.on_session_stopped(key, user, dedupe=dedupe)

    async def _deliver(
        self,
        body: dict[str, Any],
        event: dict[str, Any],
        key: ThreadKey,
        ts: str,
        bot_user_id: str | None,
        *,
        opening: bool,
    ) -> None:
        dedupe = [f"msg:{key.channel}:{ts}"]
        if body.get("event_id"):
            dedupe.insert(0, f"ev:{body['event_id']}")
        text = strip_mentions(str(event.get("text") or ""), bot_user_id)
        # A delivery the inbox has already is acknowledged and queued no more; one that cannot be kept raises,
        # so Bolt answers 500 (HTTP) or sends no ack (Socket Mode), and Slack delivers it again.
        await self.intake.on_text(key, str(event["user"]), text, ts, opening=opening, dedupe=dedupe)

    # ---- interactivity ------------------------------------------------------------

    @staticmethod
    def _where(body: dict[str, Any]) -> tuple[str, str]:
        user = str((body.get("user") or {}).get("id") or "")
        channel = str((body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id") or "")
        return user, channel

    async def click(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        kind = str(action.get("action_id", "")).split(":")[1]
        value = ButtonValue.decode(action.get("value"))
        await self._pass_click(ack, kind, value, body)

    async def _pass_click(self, ack: Any, kind: str, value: ButtonValue | None, body: dict[str, Any]) -> None:
        """Acked once the click is queued: one that cannot be recorded raises and gets no ack."""
        user, channel = self._where(body)
        if value is not None and user:
            await self.intake.on_click(
                kind, value, user=user, channel=channel, trigger_id=body.get("trigger_id"), clicked=Clicked.from_body(body),
            )
        await ack()

    async def select(self, ack: Any, body: dict[str, Any], action: dict[str, Any]) -> None:
        kind = str(action.get("action_id", "")).split(":")[1].removesuffix("_select")
        context = ButtonValue.decode(action.get("block_id"))
        chosen = str((action.get("selected_option") or {}).get("value") or "")
        value: ButtonValue | None = None
        if context is not None and kind == act.AGENT and chosen:
            value = context.model_copy(update={"a": chosen})
        elif context is not None and chosen.isdigit():
            value = context.model_copy(update={"n" if kind == act.MENU else "i": int(chosen)})
        await self._pass_click(ack, kind, value, body)

    async def view_submission(self, ack: Any, body: dict[str, Any], view: dict[str, Any]) -> None:
        context = decode_context(view.get("private_metadata"))
        user = str((body.get("user") or {}).get("id") or "")
        if context is None or not user:
            await ack()
            return
        _, widget, refusal = await self.intake.form_check(context, user)
        if widget is None:
            await ack(response_action="update", view=_notice_view(refusal))
            return
        answer, errors = parse_submission(widget, context.m, (view.get("state") or {}).get("values") or {})
        if errors:
            await ack(response_action="errors", errors=errors)
            return
        await self.intake.on_form(context, answer, user)  # queued first: acked once recorded
        await ack()


def _notice_view(text: str) -> View:
    return View(
        type="modal",
        title=PlainTextObject(text="CrewAgent"),
        close=PlainTextObject(text="Close"),
        blocks=[SectionBlock(text=MarkdownTextObject(text=text))],
    )
