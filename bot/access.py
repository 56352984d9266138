"""Who may do what: allowed channels and users from config, and thread ownership.

One model for every entry point. The person who opened a thread owns it. Anyone allowed to use
the bot may read the thread and chat with its agent there (persona answers); only the owner or an
admin may change what the thread does: start a run, answer its questions, pause/stop/resume/retry
it, pick agents or menu items, confirm changes, post artifacts. An admin (or the owner) may hand
the thread over to someone else with `*handover @user`.
"""

from __future__ import annotations

from dataclasses import dataclass

from crewagent.core.api.sessions import Session


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    reason: str = ""  # shown to the user (ephemeral) when not allowed


ALLOWED = Verdict(True)
def not_owner_reason(owner: str) -> str:
    """What a non-owner is told, and what they can do instead."""
    return (
        f"This thread belongs to <@{owner}>: only they (or an admin) can start runs, answer questions, "
        "press its buttons or steer it. You can still chat with the agent here (type a question), "
        "or mention me in a new message to start your own thread."
    )


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

    def may_act(self, user: str, session: Session) -> Verdict:
        """May `user` change what this thread does (anything beyond chatting with its agent)?"""
        if self.is_admin(user) or session.owner in (None, user):
            return ALLOWED
        return Verdict(False, not_owner_reason(str(session.owner)))

    def may_hand_over(self, user: str, session: Session) -> Verdict:
        """Admins, and the owner, may give the thread to someone else."""
        if self.is_admin(user) or session.owner in (None, user):
            return ALLOWED
        return Verdict(False, f"Only <@{session.owner}> or an admin can hand this thread over.")
