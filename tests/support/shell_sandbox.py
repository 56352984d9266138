"""shell_run tests' helpers: a run-like ToolContext (project, package, state folder, audit list) and the
scripted dev agent that runs a project's failing tests, fixes the code and runs them again."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from crewagent.core.tools.base import EffectivePolicy, GitView, Mounts, ToolContext, ToolOutcome
from crewagent.core.tools.off_limits import OffLimits
from tests.support.fakes.llm_server import Reply
from tests.support.linear_package import node_id
from tests.support.scripts import Body, calls, complete_node, current_node, is_post_completion, previous_calls, previous_results
from crewagent.core.tools.registry import ToolHost
from crewagent.core.tools.shell.command_config import CommandsConfig

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
    git: GitView | None = None  # a git project's run: its own repository, as the run's record names it
    off_limits: OffLimits = OffLimits()  # what start-up would hide (the config file, the runtime home)

    def context(self, *, approved: str | None = None, allowed_for_run: frozenset[str] = frozenset()) -> ToolContext:
        return ToolContext(
            mounts=Mounts(project=self.project, pkg=self.pkg, state=self.state, git=self.git,
                          off_limits=self.off_limits),
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

    async def tool(self, name: str, **arguments: Any) -> dict[str, Any]:
        """Any tool (fs_read, fs_write, …) in the same context, as the model calls it."""
        outcome = await self.host.execute(name, json.dumps(arguments), self.context(), call_id="c2")
        return outcome.result

    def commands_audited(self) -> list[dict[str, Any]]:
        return [e for e in self.audit if e.get("kind") == "command.run"]


def make_bench(root: Path, config: CommandsConfig | None = None) -> ShellBench:
    project, pkg, state = root / "project", root / "pkg", root / "runs" / "r1" / "state"
    for folder in (project, pkg, state):
        folder.mkdir(parents=True)
    (pkg / "scripts").mkdir()
    (pkg / "scripts" / "hello.py").write_text("print('hello from pkg')\n")
    return ShellBench(project, pkg, state, config or commands())


PYTEST = "python -m pytest -q -p no:cacheprovider"
BROKEN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"


def dev_responder(seen: list[dict[str, Any]], then: str | None = None) -> Callable[[Body], Reply]:
    """Runs the tests; on a failure patches calc.py and runs them again; on a pass runs `then` (if given)
    and completes the step."""
    first, last = node_id(1, 2), node_id(2, 2)

    def respond(body: Body) -> Reply:
        if is_post_completion(body):
            return Reply(content="Fixed and tested.")
        node = current_node(body)
        if node == last:
            return calls(complete_node(last, to=None, variables={"workflowStatus": "complete"}))
        if node != first:
            return Reply(content=f"(scripted model: no plan for {node!r})")
        made = previous_calls(body)
        names = [name for name, _ in made]
        results = previous_results(body)
        seen.extend(r for r, n in zip(results, names) if n == "shell_run")
        if not names:
            return calls(("shell_run", {"command": "rm -rf @project/*"}), ("shell_run", {"command": PYTEST}))
        if names[-1] == "fs_apply_patch":
            return calls(("shell_run", {"command": PYTEST}))
        if names[-1] == "shell_run" and results[-1].get("exitCode") not in (0, None):
            patch = {"operation": "replace", "oldText": "a - b", "newText": "a + b"}
            return calls(("fs_apply_patch", {"path": "@project/calc.py", "patch": patch}))
        if then is not None and made[-1][1].get("command") != then:
            return calls(("shell_run", {"command": then}))
        return calls(complete_node(first, to=last))

    return respond
