"""`validate-workflow` on a menu item: refuse to start a run whose files are not all there.

The package was valid when it was loaded, but a directory package can change underneath a
long-running bot; this check looks at the disk again right before the run is created.
"""

from __future__ import annotations

import asyncio

from ..base.errors import CrewError
from ..tools.mounts import SandboxViolation, resolve
from ..package.models import Package
from ..tools.base import Mounts
from .data import data_alias

_TRUTHY = {"", "true", "yes", "1", "on"}


def _problems(package: Package, workflow_id: str, check: str, mounts: Mounts) -> list[str]:
    workflow = package.workflow(workflow_id)
    if workflow is None:
        return [f"the workflow id '{workflow_id}' is not in package '{package.id}'"]
    problems: list[str] = []
    files = [("workflow.md", workflow.workflow_path), ("graph", workflow.graph_path)]
    files += [(f"step file of node '{n.id}'", n.file) for n in workflow.graph.nodes]
    for what, rel in files:
        if not (package.root / rel).is_file():
            problems.append(f"missing {what}: {rel}")
    value = check.strip()
    if value.lower() in _TRUTHY:
        return problems
    if "/" in value or "." in value:
        try:
            target = resolve(mounts, data_alias(value), write=False)
        except (SandboxViolation, ValueError):
            return [*problems, f"the check file '{value}' is not a path inside the package or project"]
        if not target.real.is_file():
            problems.append(f"missing check file: {target.alias}")
    elif package.workflow(value) is None:
        problems.append(f"the workflow id '{value}' named by validate-workflow is not in package '{package.id}'")
    return problems


async def precheck(package: Package, workflow_id: str, check: str, mounts: Mounts) -> None:
    """Raise VALIDATION_FAILED naming every missing file or id; return quietly when all is there."""
    problems = await asyncio.to_thread(_problems, package, workflow_id, check, mounts)
    if problems:
        raise CrewError(
            "VALIDATION_FAILED",
            f"Cannot start '{workflow_id}': {'; '.join(problems)}. "
            "Restore the files or fix the package, then try again.",
            {"problems": problems},
        )
