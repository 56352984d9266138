"""What a command sees inside the sandbox: which host folders appear where, and what is hidden.

The project is `/@project` and the package `/@pkg`, so `@project/…` in a command line becomes
`/@project/…` and output shows aliases again, never a host path. A linked git worktree gets the
main repository's `.git` read-only at `/@git`, so `git status`, `diff` and `log` work inside.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..base import GitView
from ..off_limits import OffLimits

PROJECT = "/@project"
PKG = "/@pkg"
GIT = "/@git"
GIT_OBJECTS = "/@git-objects"  # the shared object store a run's repository borrows history from
HOME = "/tmp/home"
TOOLS_BIN = "/opt/crewagent/bin"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SHELL = next((s for s in ("/usr/bin/bash", "/bin/bash") if os.path.exists(s)), "/bin/sh")  # what the checker reads
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_ALIAS = re.compile(r"(?<![\w@/.$-])@(project|pkg)(?=/|\b|$)")


@dataclass(frozen=True)
class Layout:
    project: Path  # real, the run's worktree or project folder
    pkg: Path  # real
    git: GitView | None = None
    toolchain: tuple[Path, ...] = ()  # read-only at the same path
    extra_read_only: tuple[tuple[str, str], ...] = ()  # (host, inside)
    off_limits: OffLimits = OffLimits()  # its hidden paths are masked where something visible holds them
    uv: Path | None = None
    replacements: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def inside(self, rel: str) -> str:
        return f"{PROJECT}/{rel}" if rel else PROJECT


def layout_for(project: Path, pkg: Path, *, toolchain: tuple[str, ...] = (),
               extra_read_only: tuple[tuple[str, str], ...] = (), off_limits: OffLimits = OffLimits(),
               uv: Path | None = None, git: GitView | None = None) -> Layout:
    """Blocking (resolves paths): call it from a thread."""
    real_project = Path(os.path.realpath(project))
    real_pkg = Path(os.path.realpath(pkg))
    if git is not None:
        borrowed = git.borrowed_objects
        git = GitView(Path(os.path.realpath(git.git_dir)), Path(os.path.realpath(borrowed)) if borrowed else None)
    replacements = [(str(real_project), "@project"), (str(real_pkg), "@pkg")]
    if git is not None:
        replacements.append((str(git.git_dir), "@project/.git"))
        if git.borrowed_objects is not None:
            replacements.append((str(git.borrowed_objects), "@project/.git/objects"))
    replacements += [(PROJECT, "@project"), (PKG, "@pkg"), (GIT_OBJECTS, "@project/.git/objects"), (GIT, "@project/.git")]
    return Layout(
        project=real_project, pkg=real_pkg, git=git,
        toolchain=tuple(Path(os.path.realpath(t)) for t in toolchain if os.path.isdir(t)),
        extra_read_only=tuple((os.path.realpath(h), i) for h, i in extra_read_only if os.path.exists(h)),
        off_limits=off_limits,
        uv=uv, replacements=tuple(sorted(replacements, key=lambda r: -len(r[0]))),
    )


def translate(line: str, *, project: str = PROJECT, pkg: str = PKG) -> str:
    """`@project/x` and `@pkg/y` written as words of the command line, as paths inside the sandbox."""
    return _ALIAS.sub(lambda m: project if m.group(1) == "project" else pkg, line)


def scrub(text: str, layout: Layout) -> str:
    """Output with every known host path (and the sandbox's own mount points) shown as aliases."""
    for real, alias in layout.replacements:
        if real in text:
            text = text.replace(real, alias)
    return text


def git_trust(layout: Layout) -> dict[str, str]:
    """Git inside may use the run's repository though the command's uid does not own the bot's folders."""
    if layout.git is None:
        return {}
    return {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": PROJECT}


def path_inside(layout: Layout, extra: tuple[str, ...] = ()) -> str:
    bins = [str(t / "bin") for t in layout.toolchain if (t / "bin").is_dir()]
    return ":".join([*extra, *bins, TOOLS_BIN, SYSTEM_PATH])

