"""`commands:` in crewagent.yml: the operator's policy for `shell_run` and the sandbox's limits.

Listing `commands:` turns the tool on. Rules match command prefixes; the strictest decision of
every part of a compound command wins (see command_policy.py).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, WithJsonSchema

Decision = Literal["allow", "ask", "forbid"]
STRICTNESS: dict[str, int] = {"allow": 0, "ask": 1, "forbid": 2}
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class CommandRule(BaseModel):
    """One rule of `commands.rules`: the longest prefix that names a part of a command line decides it."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    prefix: str = Field(min_length=1)  # the first words of a command, e.g. "python -m pytest"
    """The first words of a command, matched by whole words; a last word ending in / names paths below it."""
    decision: Decision
    """allow runs it, ask waits for the run's owner, forbid never runs it."""

    @field_validator("prefix")
    @classmethod
    def _words(cls, value: str) -> str:
        if not value.split():
            raise ValueError("the prefix must name at least one word")
        return " ".join(value.split())


class CommandLimits(BaseModel):
    """Per-process bounds inside the sandbox (the process count is per sandbox, not per host user)."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    processes: int = Field(default=256, ge=8)
    """Processes and threads of one command."""
    memory_mb: int = Field(default=4096, ge=64)  # address space of each process
    """Address space of each process, in MB."""
    file_size_mb: int = Field(default=1024, ge=1)
    """Largest file a command may write, in MB; also the size of its private /tmp."""
    cpu_seconds: int | None = Field(default=None, ge=1)  # default: the command's timeout
    """CPU time of each process (default: the command's timeout)."""


class SandboxExtras(BaseModel):
    """What the product adds to every sandbox, not the operator: read-only caches and their variables."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    read_only: tuple[tuple[str, str], ...] = ()  # (host path, path inside the sandbox)
    env: tuple[tuple[str, str], ...] = ()
    path_prefix: tuple[str, ...] = ()  # sandbox folders put in front of PATH


_ENV_SCHEMA = {"type": "object", "additionalProperties": {"type": "string"}}  # a mapping in YAML


class CommandsConfig(BaseModel):
    """`commands:` in crewagent.yml: listing it gives agents shell_run, under this policy and sandbox."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    default: Decision = "ask"
    """The decision for a command no rule names: allow, ask or forbid."""
    rules: tuple[CommandRule, ...] = ()
    """Prefixes and their decisions; the strictest part of a command line decides for the whole line."""
    timeout_seconds: int = Field(default=600, ge=1, le=86_400)  # a call may ask for less, never more
    """Seconds a command may run; a call may ask for less, never more."""
    network: bool = False
    """The sandbox's network."""
    env: Annotated[tuple[tuple[str, str], ...], WithJsonSchema(_ENV_SCHEMA)] = Field(
        default=(), json_schema_extra={"default": {}})  # {NAME: value} in YAML, kept as sorted pairs
    """The only variables passed in beside PATH, HOME and LANG; ${VAR} is read from the bot's environment."""
    output_limit_bytes: int = Field(default=32_768, ge=1_024, le=1_048_576)
    """Bytes of stdout and stderr the model gets (head and tail); the whole output is kept with the run."""
    sandbox: Literal["bwrap", "none"] = "bwrap"  # none: only when an operator writes it; logged loudly
    """none runs commands without a sandbox, with the bot's own rights (a warning at every start)."""
    toolchain: tuple[str, ...] = ()  # extra host folders visible read-only at the same path (e.g. a venv)
    """Extra host folders visible read-only at the same path (a virtualenv); their bin/ go first on PATH."""
    limits: CommandLimits = Field(default_factory=CommandLimits)
    """Per-process bounds inside the sandbox."""
    hidden: tuple[str, ...] = Field(default=(), exclude=True)  # set at start-up: the config file, the home
    extras: SandboxExtras = Field(default_factory=SandboxExtras, exclude=True)

    @field_validator("env", mode="before")
    @classmethod
    def _names(cls, value: object) -> object:
        """A mapping in YAML, kept as sorted pairs so the policy stays hashable."""
        if isinstance(value, Mapping):
            for name in value:
                if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                    raise ValueError(f"'{name}' is not a valid variable name")
            return tuple(sorted((k, str(v)) for k, v in value.items()))
        return value

    def missing_variables(self, environ: Mapping[str, str] | None = None) -> list[str]:
        """`${VAR}`s in env that the bot's environment does not set (names only, never values)."""
        environ = os.environ if environ is None else environ
        return sorted({m for _, v in self.env for m in _VARIABLE.findall(v) if m not in environ})

    def resolved_env(self, environ: Mapping[str, str] | None = None) -> dict[str, str]:
        environ = os.environ if environ is None else environ
        return {k: _VARIABLE.sub(lambda m: environ.get(m.group(1), ""), v) for k, v in self.env}
