"""What a run may never touch: one definition for the file tools and the command sandbox.

Two kinds of path are off limits, judged on the REAL path (symlinks resolved first), because a
command can make a symlink or a `.git` file anywhere in the worktree:

- git's own data: any `.git` component (folder, file, or a link's target) below a mount root. A
  worktree's `.git` names the repository the bot commits to, and its config and hooks name programs
  the bot's git would run on the host. The file tools never read or write it; commands see it
  read-only (what `git status` needs). `.gitmodules`, `.gitattributes` and `.gitignore` are the
  team's tracked files and stay editable: they name no program by themselves (drivers and hooks
  come only from config inside `.git`), and the bot's git does not recurse into submodules.
- hidden paths: the host's secret files, the bot's config file, the runtime home, and whatever
  start-up adds. Wherever one lies at or below a visible root, the sandbox masks it (an empty file
  or folder) and the file tools refuse it or, while listing and searching, leave it out. A hidden
  folder that holds a mount root (a checkout inside the runtime home) hides nothing of that mount.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

GIT_DIR = ".git"
SECRET_FILES = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/sudoers")
SECRET_DIRS = ("/etc/ssh", "/etc/ssl/private", "/etc/sudoers.d")  # host keys: readable by a bot running as root
_SECRETS = tuple(Path(p) for p in (*SECRET_FILES, *SECRET_DIRS))
GIT_DATA = "git metadata"
HIDDEN = "hidden path"
_REMEMBERED_ROOTS = 256  # a long-lived engine sees a new run's state root with every run


@dataclass(frozen=True)
class OffLimits:
    """The hidden paths of one process (real paths); the host's secrets and `.git` are always in."""

    hidden: tuple[Path, ...] = ()

    @classmethod
    def of(cls, paths: Iterable[str | os.PathLike[str]]) -> OffLimits:
        """Blocking (realpath): build it once at start-up, not per call."""
        real = (Path(os.path.realpath(os.path.expanduser(p))) for p in paths if os.fspath(p))
        return cls(tuple(dict.fromkeys(real)))

    @cached_property
    def _texts(self) -> tuple[str, ...]:  # every file tool call compares against these: strings are fast
        return tuple(map(str, self.paths()))

    def paths(self) -> tuple[Path, ...]:
        """Every hidden path, the host's secrets included."""
        return (*_SECRETS, *self.hidden)

    def within(self, root: Path) -> tuple[Path, ...]:
        """The hidden paths at or below `root` (a real folder): what a view of it must not show."""
        return tuple(map(Path, self._below(str(root))))

    def skipped_in(self, root: Path) -> frozenset[str]:
        """`within(root)` as strings, for walks that compare each entry's real path."""
        return frozenset(self._below(str(root)))

    def refusal(self, root: str, real: str) -> str | None:
        """Why `real` (a real path at or below the real mount root `root`) is off limits, or None."""
        if names_git_data(real[len(root):]):
            return GIT_DATA
        below = self._by_root.get(root)
        if below is None:  # mount roots are few (a project, a package, a run's state): each worked out once
            if len(self._by_root) >= _REMEMBERED_ROOTS:
                self._by_root.clear()
            below = self._by_root[root] = self._below(root)
        for hidden in below:
            if real == hidden or real.startswith(hidden + os.sep):
                return HIDDEN
        return None

    def _below(self, root: str) -> tuple[str, ...]:
        prefix = root if root.endswith(os.sep) else root + os.sep
        return tuple(h for h in self._texts if h == root or h.startswith(prefix))

    @cached_property
    def _by_root(self) -> dict[str, tuple[str, ...]]:
        return {}


def names_git_data(path: str) -> bool:
    """A `.git` component in `path` (casefolded: `.GIT` is the same folder on a case-insensitive disk)."""
    return any(part.casefold() == GIT_DIR for part in path.split(os.sep))
