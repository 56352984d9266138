"""What a package check reads from disk, and the base of the checks: problems as values, files
located inside the package only."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .problems import Problem

_DRIVE = re.compile(r"^[A-Za-z]:")


@dataclass
class StepDoc:
    path: str
    frontmatter: dict[str, Any]
    body: str
    text: str


@dataclass
class WorkflowDocs:
    """One workflow as read from disk, after its checks passed."""

    id: str
    display_name: str
    description: str | None
    workflow_path: str
    graph_path: str
    graph: dict[str, Any]
    template: str
    steps: dict[str, StepDoc]
    node_files: dict[str, str]  # node id -> package-relative path actually found


@dataclass
class PackageDocs:
    root: Path
    manifest: dict[str, Any]
    agents_path: str
    agents: dict[str, Any]
    workflows: list[WorkflowDocs]


@dataclass
class WorkflowRef:
    id: str
    workflow: str
    graph: str
    where: str  # JSON path in bmad.json of the record (or "$.entry")
    display_name: str | None = None
    description: str | None = None


@dataclass
class MenuTargets:
    workflow_ids: list[str]
    workflow_paths: list[str]
    prompt_ids: set[str] = field(default_factory=set)


def package_ref(ref: str) -> str | None:
    """Normalise a package reference (`@pkg/x`, `{package-root}/x`, `./x`, `x`) to `x`.

    None when the reference is not a plain relative path that stays inside the package.
    """
    ref = ref.strip()
    for prefix in ("@pkg/", "{package-root}/"):
        ref = ref.removeprefix(prefix)
    if not ref or "\x00" in ref or "\\" in ref or ref.startswith("/") or _DRIVE.match(ref):
        return None
    parts = [p for p in ref.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        return None
    return "/".join(parts)


class Inspector:
    """Collects the problems of one package directory; the checks are its subclasses."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.problems: list[Problem] = []

    def error(self, file: str, path: str, message: str, fix: str, code: str = "PACKAGE_INVALID") -> None:
        self.problems.append(Problem(file, path, message, fix, "error", code))

    def warn(self, file: str, path: str, message: str, fix: str, code: str = "PACKAGE_WARNING") -> None:
        self.problems.append(Problem(file, path, message, fix, "warning", code))

    def locate(self, ref: str, *, base: str = "") -> str | None:
        """Package-relative path of an existing regular file inside the package, else None."""
        rel = package_ref(f"{base}/{ref}" if base else ref)
        if rel is None:
            return None
        real = (self.root / rel).resolve()
        if not real.is_relative_to(self.root) or not real.is_file():
            return None
        return rel
