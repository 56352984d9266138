"""Git repositories a run made inside its worktree: the bot's git never enters them.

A folder below the worktree's top that holds a `.git` (folder, file or link) is a repository of
its own, and git would read its config (and, from `status`, run its fsmonitor) if it went in.
The bot finds them first, without following links, and leaves them out: a delivery refuses and
says what to do, a cleanup saves everything else.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

DOT_GIT = ".git"


def nested_repositories(root: Path) -> list[str]:
    """Worktree-relative folders (posix) holding a `.git`, outermost only. Blocking: call it from a thread."""
    found: list[str] = []
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        if folder != root and any(entry.name == DOT_GIT for entry in entries):
            found.append(PurePosixPath(folder.relative_to(root)).as_posix())
            continue
        for entry in entries:
            if entry.name != DOT_GIT and entry.is_dir(follow_symlinks=False):
                pending.append(Path(entry.path))
    return sorted(found)


def excluded(folders: list[str]) -> list[str]:
    """Pathspecs that keep `git add` out of these folders."""
    return [f":(exclude,literal){folder}" for folder in folders]
