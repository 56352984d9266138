"""What a thread is told outside a session call: refusals (and the access checks behind them), a person's
name as everyone sees it, and a clicked message settled so its buttons cannot be used twice."""

from __future__ import annotations

from ..access import AccessPolicy, Verdict
from ..base.actions import Clicked
from ..base.thread import ThreadKey, ThreadRecord
from ..render import blocks
from ..outgoing import Edit, Ephemeral
from ..slack_port import SlackPort


class ThreadNotes:
    def __init__(self, io: SlackPort, access: AccessPolicy) -> None:
        self.io = io
        self.access = access

    async def refuse(self, key: ThreadKey, user: str, text: str) -> None:
        await self.io.send(Ephemeral(key.channel, user, text, thread_ts=key.thread_ts))

    def may_act_here(self, key: ThreadKey, record: ThreadRecord, user: str) -> Verdict:
        """Allowed to use the bot in this channel, and to act in this thread."""
        used = self.access.may_use(user, key.channel, is_dm=key.is_dm)
        return used if not used.allowed else self.access.may_act(user, record.session)

    async def permitted(self, key: ThreadKey, record: ThreadRecord, user: str) -> bool:
        """`may_act_here`, with an ephemeral refusal when not."""
        verdict = self.may_act_here(key, record, user)
        if not verdict.allowed:
            await self.refuse(key, user, verdict.reason)
        return verdict.allowed

    async def name(self, user: str) -> str:
        """How a user is named in a message everyone sees (posted text never mentions anyone)."""
        name, _ = await self.io.user_identity(user)
        return name or "a member of this channel"

    async def settle(self, key: ThreadKey, clicked: Clicked | None, outcome: str) -> None:
        """Replace the clicked message's buttons with what was done, so it cannot be used twice."""
        if clicked is not None:
            await self.io.send(Edit(key.channel, clicked.ts, blocks.settled(clicked, outcome)))
