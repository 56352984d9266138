"""Alias paths (`@project/...`, `@pkg/...`, `@state/...`) to real paths, with the sandbox checks.

The model only ever sees alias paths. Every rejection names the alias and a reason, never a real
path, and carries `details` {mount, path, reason} for the audit log. What is off limits once the
real path is known (git's data, hidden paths) is defined in off_limits.py, shared with the sandbox.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..base.errors import CrewError
from .base import Mounts
from .off_limits import GIT_DATA, names_git_data

MOUNT_NAMES = ("@project", "@pkg", "@state")
_HINT = "Use an alias path starting with @project/, @pkg/ (read-only) or @state/ (run state)."
_DRIVE = re.compile(r"^[A-Za-z]:")
# BMAD-style placeholders that package texts use for the same roots.
_PLACEHOLDERS = {
    "{project-root}": "@project",
    "{artifacts-root}": "@project/artifacts",
    "{package-root}": "@pkg",
    "{state-root}": "@state",
}


class SandboxViolation(CrewError):
    def __init__(self, message: str, *, mount: str, path: str, reason: str) -> None:
        super().__init__("E_SANDBOX_VIOLATION", message, {"mount": mount, "path": path, "reason": reason})


@dataclass(frozen=True)
class Resolved:
    real: Path  # server path: never show it to the model or a user
    alias: str  # normalised, e.g. "@project/artifacts/x.md" ("@project" for the root)
    mount: str  # "@project", "@pkg" or "@state"
    rel: str  # path inside the mount, "" for the root

    @property
    def project_relative(self) -> str | None:
        """`artifacts/x.md` for files under @project (the form state `artifacts[]` stores)."""
        return self.rel if self.mount == "@project" else None


def normalise(alias: str) -> tuple[str, str]:
    """Split an alias path into (mount, relative path) after the syntactic checks."""
    if not isinstance(alias, str) or not alias.strip():
        raise SandboxViolation(f"The path is empty. {_HINT}", mount="", path="", reason="empty path")
    if "\x00" in alias:
        raise SandboxViolation("The path contains a NUL byte.", mount="", path="", reason="NUL byte")
    text = alias.strip().replace("\\", "/")
    if text.startswith("/") or _DRIVE.match(text):
        raise SandboxViolation(
            f"Absolute paths are not allowed. {_HINT}", mount="", path="", reason="absolute path"
        )
    for placeholder, mount in _PLACEHOLDERS.items():
        if text.startswith(placeholder):
            text = mount + text[len(placeholder) :]
            break
    while text.startswith("./"):
        text = text[2:]
    if ".." in text.split("/"):
        raise SandboxViolation(
            f"'{text}' contains a '..' segment; paths may not leave their mount.",
            mount=text.split("/")[0] if text.startswith("@") else "",
            path=text,
            reason="parent traversal",
        )
    head, _, rest = text.partition("/")
    if head.startswith("@"):
        mount = head
        if mount not in MOUNT_NAMES:
            raise SandboxViolation(
                f"Unknown mount '{mount}' in '{text}'. {_HINT}", mount=mount, path=text, reason="unknown mount"
            )
    elif head == "artifacts":
        mount, rest = "@project", text  # step texts say `artifacts/...`, meaning the project's
    else:
        raise SandboxViolation(
            f"'{text}' has no mount. {_HINT}", mount="", path=text, reason="missing mount"
        )
    parts = [p for p in rest.split("/") if p not in ("", ".")]
    return mount, "/".join(parts)


def alias_of(mount: str, rel: str) -> str:
    return f"{mount}/{rel}" if rel else mount


def resolve(mounts: Mounts, alias: str, *, write: bool) -> Resolved:
    """Map an alias path to a real path inside its mount, or raise SandboxViolation."""
    mount, rel = normalise(alias)
    shown = alias_of(mount, rel)
    root = _root(mounts, mount)
    if root is None:
        raise SandboxViolation(
            f"{shown}: there is no run state here (@state exists only inside a workflow run).",
            mount=mount,
            path=shown,
            reason="no run state here",
        )
    if write and mount == "@pkg":
        raise SandboxViolation(
            f"{shown}: @pkg is read-only. Write under @project/ (e.g. @project/artifacts/) instead.",
            mount=mount,
            path=shown,
            reason="write to read-only mount",
        )
    if names_git_data(rel):  # spelled in the path (a `.git` that is a link to elsewhere is git's too)
        raise _off_limits(shown, mount, GIT_DATA)
    root_real = _real_root(os.fspath(root))
    real = _real_below(root_real, rel.split("/")) if rel else root_real
    if real != root_real and not real.startswith(root_real + os.sep):
        raise SandboxViolation(
            f"{shown} resolves outside {mount} (through a symlink); it cannot be used.",
            mount=mount,
            path=shown,
            reason="symlink escape",
        )
    reason = mounts.off_limits.refusal(root_real, real)
    if reason is not None:
        raise _off_limits(shown, mount, reason)
    return Resolved(real=Path(real), alias=shown, mount=mount, rel=rel)


def _off_limits(shown: str, mount: str, reason: str) -> SandboxViolation:
    if reason == GIT_DATA:
        # a run's worktree points at the team's repository through it, and a changed git config or
        # hook would run commands on the server when the run is committed
        message = f"{shown}: git's own data cannot be read or written; work with the project's files instead."
    else:
        message = f"{shown} is kept from agents by the operator (the bot's own settings or data); leave it alone."
    return SandboxViolation(message, mount=mount, path=shown, reason=reason)


@lru_cache(maxsize=1024)
def _real_root(root: str) -> str:
    """Mount roots are set up by the runtime, never by the model: resolved once per process."""
    return os.path.realpath(root)


def _real_below(root_real: str, parts: list[str]) -> str:
    """realpath(root_real/parts...), looking only at the components below the (already real) root.

    Like realpath it follows every existing symlink, including the parent of a file about to be
    created: the first symlink found hands the whole path to os.path.realpath; below a missing
    component nothing can be a symlink, so the rest is joined as is.
    """
    path = root_real.rstrip(os.sep)
    for i, part in enumerate(parts):
        path = f"{path}{os.sep}{part}"
        try:
            mode = os.lstat(path).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return os.path.join(path, *parts[i + 1 :])
        except OSError:
            mode = stat.S_IFLNK  # unreadable: let realpath decide, as it would have
        if stat.S_ISLNK(mode):
            return os.path.realpath(os.path.join(root_real, *parts))
    return path


def _root(mounts: Mounts, mount: str) -> Path | None:
    if mount == "@project":
        return mounts.project
    if mount == "@pkg":
        return mounts.pkg
    return mounts.state
