"""Who a sandboxed command is on the host, and the worktree handed over to it.

A bot running as root never lends root to a command: the command becomes an unprivileged host uid and gid
with no supplementary groups (`commands.run_as`, by default the project folder's owner when that is not
root, else nobody, 65534:65534) before it starts, so every file it writes lands owned by that user and
nothing it does is done as root. The switch happens inside the sandbox, after bwrap's mounts (setpriv, the
first word of the command line inside), because bwrap started as that user could not bind a folder only
root may walk to. A bot that is not root cannot switch: its commands run as itself.

A worktree the bot made as root is handed to the sandbox user before its first command (a recursive
lchown), so the command can write it; the bot, root, still reads and writes it. Each command checks only
the folder's own owner, which is cheap.
"""

from __future__ import annotations

import grp
import os
import pwd
from dataclasses import dataclass
from functools import cache
from pathlib import Path

NOBODY = 65534  # the overflow id: owns nothing on a usual host
SETPRIV_PATHS = ("/usr/bin/setpriv", "/bin/setpriv")
SWITCH_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")  # kept by bwrap for the switch only


class UnknownSandboxUser(ValueError):
    """`commands.run_as` names a user or group this host does not have."""


@dataclass(frozen=True)
class SandboxUser:
    uid: int
    gid: int
    switched: bool  # the bot is root and commands run as this user instead; False: as the bot itself

    def describe(self) -> str:
        return f"{self.uid}:{self.gid}"


def bot_is_root() -> bool:
    return os.geteuid() == 0


def sandbox_user(run_as: str | None, project: Path) -> SandboxUser:
    """Blocking (a stat and the user database). Raises UnknownSandboxUser for a name this host lacks."""
    if not bot_is_root():
        return SandboxUser(os.getuid(), os.getgid(), switched=False)
    if run_as:
        uid, gid = parse_run_as(run_as)
        return SandboxUser(uid, gid, switched=True)
    owner = os.stat(project)
    if owner.st_uid == 0:
        return SandboxUser(NOBODY, NOBODY, switched=True)
    try:
        gid = pwd.getpwuid(owner.st_uid).pw_gid
    except KeyError:
        gid = owner.st_gid
    return SandboxUser(owner.st_uid, gid, switched=True)


def parse_run_as(value: str) -> tuple[int, int]:
    """`uid:gid`, `uid`, `user` or `user:group` as numeric ids; a lone user takes its primary group."""
    user, _, group = value.partition(":")
    uid = _user_id(user.strip())
    if group.strip():
        gid = _group_id(group.strip())
    elif user.strip().isdigit():
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = uid
    else:
        gid = pwd.getpwnam(user.strip()).pw_gid
    if uid == 0 or gid == 0:
        raise UnknownSandboxUser(f"commands.run_as must not be root ({value!r})")
    return uid, gid


def hand_over(project: Path, user: SandboxUser) -> bool:
    """Blocking: give a root-owned project to the sandbox user (True when it did this time), all but the `.git`
    in it (the bot's git names its repository itself; the command gets no say in where it points). A folder
    another user owns is left alone (the operator chose it). Files the bot writes later take their folder's
    owner (core/base/atomic.py), so the tree stays the user's."""
    if not user.switched or os.lstat(project).st_uid != 0:
        return False  # mine already, or another user's: the one check every command pays
    for folder, dirs, files in os.walk(project):
        if Path(folder) == project:
            dirs[:] = [d for d in dirs if d != ".git"]
            files = [f for f in files if f != ".git"]
        for name in (*dirs, *files):
            os.chown(os.path.join(folder, name), user.uid, user.gid, follow_symlinks=False)
    os.chown(project, user.uid, user.gid, follow_symlinks=False)
    return True


@cache
def setpriv() -> str | None:
    """util-linux's setpriv, which every sandbox sees under /usr; None where the host has none."""
    return next((p for p in SETPRIV_PATHS if os.access(p, os.X_OK)), None)


def switch_prefix(program: str, user: SandboxUser) -> list[str]:
    """The words before the command that make it the sandbox user, for good: its uid and gid, no supplementary
    groups, and an empty bounding set, so no capability can come back."""
    return [program, f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--bounding-set=-all",
            "--inh-caps=-all", "--"]


def _user_id(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return pwd.getpwnam(text).pw_uid
    except KeyError:
        raise UnknownSandboxUser(f"commands.run_as names no user {text!r} on this host") from None


def _group_id(text: str) -> int:
    if text.isdigit():
        return int(text)
    try:
        return grp.getgrnam(text).gr_gid
    except KeyError:
        raise UnknownSandboxUser(f"commands.run_as names no group {text!r} on this host") from None
