"""Who may do what: allowed channels and users from config, and run ownership.

Anyone allowed may open a thread, pick agents and read results; only the person who started
the thread's run (the session owner) or an admin may steer that run.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.session.model import Session


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""  # shown to the user (ephemeral) when not allowed


ALLOWED = Verdict(True)


@dataclass(frozen=True)
class AccessPolicy:
    allowed_channels: frozenset[str] = frozenset()  # empty: every channel the bot is in
    allowed_users: frozenset[str] = frozenset()  # empty: everyone
    admins: frozenset[str] = frozenset()

    def is_admin(self, user: str) -> bool:
        return user in self.admins

    def may_use(self, user: str, channel: str, *, is_dm: bool = False) -> Verdict:
        """May `user` talk to the bot here at all?"""
        if self.is_admin(user):
            return ALLOWED
        if self.allowed_users and user not in self.allowed_users:
            return Verdict(False, "You're not on this bot's list of allowed users. Ask a workspace admin to add you.")
        if self.allowed_channels and not is_dm and channel not in self.allowed_channels:
            return Verdict(
                False, "I'm not enabled in this channel. Ask an admin to add it to the bot's allowed channels."
            )
        return ALLOWED

    def may_steer(self, user: str, session: Session) -> Verdict:
        """May `user` answer this session's questions, confirm changes, pause/stop/resume/retry its run?"""
        if self.is_admin(user) or session.owner in (None, user):
            return ALLOWED
        return Verdict(
            False,
            f"This run belongs to <@{session.owner}>; only they (or an admin) can answer or control it. "
            "Mention me in a new message to start your own.",
        )
