"""`commands:` in crewagent.yml: the operator's policy for `shell_run` and the sandbox's limits.

Listing `commands:` turns the tool on. Rules match command prefixes; the strictest decision of
every part of a compound command wins (see command_policy.py).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Decision = Literal["allow", "ask", "forbid"]
STRICTNESS: dict[str, int] = {"allow": 0, "ask": 1, "forbid": 2}
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ID = re.compile(r"[0-9]+|[A-Za-z_][A-Za-z0-9_.-]*\$?")


class CommandRule(BaseModel):
    """A decision for the commands that start with `prefix`."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    prefix: str = Field(min_length=1)
    """The first words of a command, e.g. `python -m pytest`; a last word ending in `/` matches paths below it."""
    decision: Decision
    """allow (runs), ask (waits for the run owner) or forbid (never runs)."""

    @field_validator("prefix")
    @classmethod
    def _words(cls, value: str) -> str:
        if not value.split():
            raise ValueError("the prefix must name at least one word")
        return " ".join(value.split())


class CommandLimits(BaseModel):
    """Bounds inside the sandbox (the process count is the sandbox's own, not the host user's)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    processes: int = Field(default=256, ge=8)
    """Processes and threads one command may have at once."""
    memory_mb: int = Field(default=4096, ge=64)
    """Memory of all of one command's processes together, in MB (each process alone without a memory cgroup)."""
    file_size_mb: int = Field(default=1024, ge=1)
    """Largest file a command may write, in MB."""
    disk_mb: int = Field(default=2048, ge=16)
    """What one command may add to the worktree and its /tmp together, in MB; past it the command is stopped."""
    cpu_seconds: int | None = Field(default=None, ge=1)
    """CPU time of each process (default: the command's timeout)."""


class SandboxExtras(BaseModel):
    """What the product adds to every sandbox, not the operator: read-only caches and their variables."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    read_only: tuple[tuple[str, str], ...] = ()  # (host path, path inside the sandbox)
    env: tuple[tuple[str, str], ...] = ()
    path_prefix: tuple[str, ...] = ()  # sandbox folders put in front of PATH


class CommandsConfig(BaseModel):
    """Commands agents may run (`shell_run`), in a sandbox. Listing this section turns the tool on."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    default: Decision = "ask"
    """The decision for commands no rule names."""
    rules: tuple[CommandRule, ...] = ()
    """Prefix rules; for each part of a command line the longest matching prefix decides, and the strictest part wins."""
    timeout_seconds: int = Field(default=600, ge=1, le=86_400)
    """Longest a command may run; a call may ask for less, never more."""
    network: bool = False
    """Whether commands have the host's network (default: none at all)."""
    env: dict[str, str] = Field(default_factory=dict)
    """The only variables passed in beside PATH, HOME, LANG and PYTHONDONTWRITEBYTECODE; `${VAR}` is taken from the bot's environment."""
    output_limit_bytes: int = Field(default=32_768, ge=1_024, le=1_048_576)
    """stdout and stderr together as the model gets them (head and tail); the whole log stays with the run."""
    sandbox: Literal["bwrap", "none"] = "bwrap"
    """bwrap (bubblewrap), or none: commands run with the bot's own rights (logged loudly at start-up)."""
    toolchain: tuple[str, ...] = ()
    """Extra host folders visible read-only at the same path (e.g. a virtualenv); their bin/ goes first on PATH."""
    limits: CommandLimits = Field(default_factory=CommandLimits)
    """Process count, memory, file size, disk and CPU bounds of each command."""
    run_as: str | None = None
    """When the bot runs as root, the host user commands run as instead: `uid:gid`, `uid`, `user` or `user:group`
    (never root). Default: the project folder's owner when that is not root, else nobody (65534:65534). A
    worktree the bot made as root is handed to this user before its first command. Ignored when the bot is
    not root (commands then run as the bot's own user)."""
    landlock: Literal["auto", "on", "off"] = "auto"
    """Landlock inside the sandbox, where the kernel has it: writes only to the project, /tmp and /dev/shm,
    and no reaching the host's abstract Unix sockets or signalling outside. auto: for commands with the
    host's network (there it closes sockets nothing else does; otherwise the sandbox's own mounts and user
    already give the same, and it costs one Python start, 15-60 ms, a command); on: every command (a command
    fails if the kernel lacks it); off: never."""
    extras: SandboxExtras = Field(default_factory=SandboxExtras, exclude=True)
    scripts_cache: str | None = Field(default=None, exclude=True)  # prepared BMAD script dependencies (start-up)

    def __hash__(self) -> int:  # the engine caches tool sets by policy; `env` is a mapping
        return hash(json.dumps(self.model_dump(mode="json"), sort_keys=True))

    @field_validator("run_as")
    @classmethod
    def _run_as(cls, value: str | None) -> str | None:
        if value is None:
            return None
        user, _, group = value.strip().partition(":")
        if not _ID.fullmatch(user) or (group and not _ID.fullmatch(group)):
            raise ValueError("run_as is `uid:gid`, `uid`, `user` or `user:group`")
        if any(part == "root" or (part.isdigit() and int(part) == 0) for part in (user, group)):
            raise ValueError("run_as must not be root: commands would hold root's rights on the host")
        return value.strip()

    @field_validator("env")
    @classmethod
    def _names(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _NAME.fullmatch(name):
                raise ValueError(f"'{name}' is not a valid variable name")
        return value

    def missing_variables(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """`${VAR}`s in env that the bot's environment does not set (names only, never values)."""
        environ = os.environ if environ is None else environ
        return sorted({m for v in self.env.values() for m in _VARIABLE.findall(v) if m not in environ})

    def resolved_env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        environ = os.environ if environ is None else environ
        return {k: _VARIABLE.sub(lambda m: environ.get(m.group(1), ""), v) for k, v in self.env.items()}
