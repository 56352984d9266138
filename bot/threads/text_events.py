"""Typed text in a thread (a reply, a mention, a DM, `/crew`): who may say it, and which session call it is.

The text's `*command` was parsed once, when the event was made (`ThreadEvent.command`, `.handover`).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from crewagent.core.api.sessions import TypedText

from ..access import AccessPolicy, Verdict
from ..base.event import ThreadEvent
from ..base.thread import ThreadRecord
from ..config import BotConfig
from ..render import blocks
from ..outgoing import Post
from ..slack_port import SlackPort
from .event_claim import Claims
from .session_calls import ChooseModel, GuestChat, OpenThread, RunControl, SayText, ThreadCall
from .store import ThreadStore
from .thread_notes import ThreadNotes

if TYPE_CHECKING:
    from ..replicas.threads import PostgresThreadStore

READ_ONLY_COMMANDS = frozenset({"status", "help"})  # what a non-owner may type in someone else's thread


class TextEvents:
    def __init__(
        self,
        *,
        config: BotConfig,
        store: ThreadStore | PostgresThreadStore,
        access: AccessPolicy,
        claims: Claims,
        notes: ThreadNotes,
        io: SlackPort,
    ) -> None:
        self.config = config
        self.store = store
        self.access = access
        self.claims = claims
        self.notes = notes
        self.io = io

    async def decide(self, event: ThreadEvent) -> ThreadCall | None:
        """The session call for typed text in the thread's order; None when it was refused or handled here."""
        record = await self.store.get(event.key)
        if record is None and not event.opening:
            return None  # not a conversation of ours
        claim = await self.claims.for_reply(event)
        if claim is None:
            return None
        call = await self._decided(event, record)
        answered = call is not None and isinstance(call.call, (OpenThread, SayText, GuestChat))
        if call is None or not answered or call.record.session.mode == "run":
            # Nothing waits for a reply to be recorded: a run takes the text into its own durable state now,
            # and a resumed run (not this event) carries it on after a crash.
            await claim.settle()
            return call
        return dataclasses.replace(call, claim=claim)

    async def _decided(self, event: ThreadEvent, record: ThreadRecord | None) -> ThreadCall | None:
        key, user = event.key, event.user
        verdict = self.access.may_use(user, key.channel, is_dm=key.is_dm)
        if not verdict.allowed:
            await self.notes.refuse(key, user, verdict.reason)
            return None
        if record is None:
            record = ThreadRecord.new(key, owner=user, binding=self.config.binding_name(key.channel))
            return ThreadCall(record, OpenThread(event.typed), user, reaction_ts=event.message_ts)
        if event.handover is not None:
            await self._hand_over(record, user, event.handover)
            return None
        acting = self.access.may_act(user, record.session)
        if not acting.allowed:
            return await self._as_guest(record, event, acting)
        if event.command == "model":
            return ThreadCall(record, ChooseModel(event.typed), user)
        if event.command is not None:
            return ThreadCall(record, RunControl(event.command), user)
        return ThreadCall(record, SayText(event.typed), user, reaction_ts=event.message_ts)

    async def decide_now(self, record: ThreadRecord, event: ThreadEvent) -> ThreadCall | None:
        """`*pause` / `*stop` for the run pumping in the thread, outside the thread's order."""
        if event.command is None or not await self.claims.take(event, final=True):
            return None
        if not await self.notes.permitted(record.key, record, event.user):
            return None
        return ThreadCall(record, RunControl(event.command), event.user, now=True)

    async def _as_guest(self, record: ThreadRecord, event: ThreadEvent, refusal: Verdict) -> ThreadCall | None:
        """Someone else's thread: they may ask for the status or the help, or chat with the agent, nothing more."""
        command, text = event.command, event.text
        if command in READ_ONLY_COMMANDS:
            return ThreadCall(record, RunControl(command), event.user)
        if command == "model":
            return await self._guest_model(record, event)
        if command is not None or record.session.mode == "idle" or not text.strip():
            await self.notes.refuse(record.key, event.user, refusal.reason)
            return None
        return ThreadCall(record, GuestChat(text), event.user, reaction_ts=event.message_ts)

    async def _guest_model(self, record: ThreadRecord, event: ThreadEvent) -> ThreadCall | None:
        """Anyone may ask which model the thread uses; only its owner or an admin may switch it."""
        if len(event.text.split()) < 2:
            return ThreadCall(record, ChooseModel(TypedText("*model", "model")), event.user)
        owner = record.session.owner
        text = f"Only <@{owner}> or an admin can switch this thread's model. Type `*model` to see which one it uses."
        await self.notes.refuse(record.key, event.user, text)
        return None

    async def _hand_over(self, record: ThreadRecord, user: str, target: str) -> None:
        verdict = self.access.may_hand_over(user, record.session)
        if not verdict.allowed:
            await self.notes.refuse(record.key, user, verdict.reason)
            return
        if not target:
            await self.notes.refuse(record.key, user, "Name the new owner: `*handover @someone`.")
            return
        record.session.owner = target
        await self.store.put(record)
        giver, taker = await self.notes.name(user), await self.notes.name(target)
        text = (
            f"{giver} handed this thread over to {taker}. From now on only {taker} (or an admin) "
            "can start runs, answer questions and steer them here."
        )
        await self.io.send(Post(record.channel, record.thread_ts, blocks.notice(text)))
