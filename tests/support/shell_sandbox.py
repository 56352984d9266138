"""A run-like ToolContext for shell_run tests: a project, a package, a state folder and an audit list."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.tools.base import EffectivePolicy, Mounts, ToolContext, ToolOutcome
from core.tools.registry import ToolHost
from core.tools.shell.command_config import CommandsConfig

TOOLCHAIN = tuple(dict.fromkeys((sys.prefix, sys.base_prefix)))  # this Python and pytest, read-only inside


def commands(**overrides: Any) -> CommandsConfig:
    data: dict[str, Any] = {"default": "allow", "timeout_seconds": 60, "toolchain": list(TOOLCHAIN)}
    data.update(overrides)
    return CommandsConfig.model_validate(data)


@dataclass
class ShellBench:
    project: Path
    pkg: Path
    state: Path
    config: CommandsConfig
    audit: list[dict[str, Any]] = field(default_factory=list)
    host: ToolHost = field(default_factory=ToolHost)

    def context(self, *, approved: str | None = None, allowed_for_run: frozenset[str] = frozenset()) -> ToolContext:
        return ToolContext(
            mounts=Mounts(project=self.project, pkg=self.pkg, state=self.state),
            policy=EffectivePolicy(shell=self.config), mode="run", agent_id="dev", run_id="run-1",
            audit=self.audit.append, approved=approved, allowed_for_run=allowed_for_run,
        )

    async def run(self, command: str, **extra: Any) -> dict[str, Any]:
        outcome = await self.call(command, **extra)
        return outcome.result

    async def call(self, command: str, *, approved: str | None = None,
                   allowed_for_run: frozenset[str] = frozenset(), **arguments: Any) -> ToolOutcome:
        ctx = self.context(approved=approved, allowed_for_run=allowed_for_run)
        return await self.host.execute("shell_run", json.dumps({"command": command, **arguments}), ctx, call_id="c1")

    def commands_audited(self) -> list[dict[str, Any]]:
        return [e for e in self.audit if e.get("kind") == "command.run"]


def make_bench(root: Path, config: CommandsConfig | None = None) -> ShellBench:
    project, pkg, state = root / "project", root / "pkg", root / "runs" / "r1" / "state"
    for folder in (project, pkg, state):
        folder.mkdir(parents=True)
    (pkg / "scripts").mkdir()
    (pkg / "scripts" / "hello.py").write_text("print('hello from pkg')\n")
    return ShellBench(project, pkg, state, config or commands())
