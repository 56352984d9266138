"""BMAD scripts in the sandbox: the prepared wheel folder and uv's variables go into every command's sandbox,
and a command that runs a package's scripts first waits (bounded) for that package's preparation.

Preparation itself (resolving each PEP 723 script's dependencies, outside the sandbox, with network)
lives in core/package/script_deps.py; this module only hooks it to shell_run.
"""

from __future__ import annotations

import asyncio
import logging
import re
from pathlib import Path

from ...package.script_deps import (
    ScriptPrepError, ScriptsPreparer, script_deps_dir, scripts_ready, scripts_sandbox_extras,
)
from .command_config import CommandsConfig, SandboxExtras

log = logging.getLogger(__name__)
RUNS_SCRIPTS = re.compile(r"(?<![\w@/.-])@pkg/|\buv\b")  # a command that may run a package's scripts
MAX_WAIT_SECONDS = 600.0

_preparers: dict[tuple[str, int], ScriptsPreparer] = {}  # by cache folder and event loop


def with_scripts(commands: CommandsConfig, home: Path) -> CommandsConfig:
    """`commands` with the runtime home's script wheels bound read-only and uv's offline variables set."""
    cache = script_deps_dir(home)
    read_only, env = scripts_sandbox_extras(cache)
    extras = commands.extras
    merged = SandboxExtras(read_only=tuple(dict.fromkeys(extras.read_only + read_only)),
                           env=tuple(dict(extras.env + env).items()), path_prefix=extras.path_prefix)
    return commands.model_copy(update={"extras": merged, "scripts_cache": str(cache)})


async def wait_for_scripts(commands: CommandsConfig, package_root: Path, command: str, timeout: float) -> None:
    """Before a command that may run the package's scripts: their dependencies are ready (or the wait ends)."""
    if commands.scripts_cache is None or not RUNS_SCRIPTS.search(command):
        return
    wait = min(timeout, MAX_WAIT_SECONDS)
    if await scripts_ready(package_root, wait) is not None:  # the preparation serve started for it
        return
    loop = asyncio.get_running_loop()
    key = (commands.scripts_cache, id(loop))
    preparer = _preparers.get(key)
    if preparer is None:
        preparer = _preparers[key] = await asyncio.to_thread(ScriptsPreparer, Path(commands.scripts_cache))
    try:
        await asyncio.wait_for(preparer.prepare(package_root, "current"), wait)
    except (TimeoutError, ScriptPrepError, OSError) as exc:  # the command runs anyway; a missing dependency says so
        log.warning("scripts of package %s are not ready: %s", package_root.name, exc or "timed out")
