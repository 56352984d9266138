"""Turn a package directory or `.bmad` file into a validated, fully loaded Package.

A directory is used in place; an archive is unpacked safely into a cache (see archive.py). All
checks live in validate.py; this module only resolves the input and builds the typed models, so a
Package exists only when the checks found no error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .archive import DEFAULT_LIMITS, ArchiveError, ArchiveLimits, extract_package
from .models import Agent, Graph, Package, StepFile, Workflow
from .next_steps import NEXT_STEPS_FILE, NextSteps, read_next_steps
from .validate import (
    CLASSIC_CODE,
    ClassicWorkflowNotSupported,
    PackageDocs,
    PackageInvalid,
    Problem,
    WorkflowDocs,
    check_package_dir,
    json_path,
)

__all__ = ["PackageInvalid", "ClassicWorkflowNotSupported", "Problem", "load_package", "validate_path"]


def load_package(
    path: str | Path, *, cache_dir: Path | None = None, limits: ArchiveLimits = DEFAULT_LIMITS
) -> Package:
    """Load a package or raise PackageInvalid (ClassicWorkflowNotSupported for classic BMAD) with every problem.

    Without `cache_dir`, an archive is unpacked into a new temp dir that lives as long as the process needs it.
    """
    package, problems = validate_path(path, cache_dir=cache_dir, limits=limits)
    if package is None:
        if any(p.code == CLASSIC_CODE and p.level == "error" for p in problems):
            raise ClassicWorkflowNotSupported(problems)
        raise PackageInvalid(problems)
    return package


def validate_path(
    path: str | Path, *, cache_dir: Path | None = None, limits: ArchiveLimits = DEFAULT_LIMITS
) -> tuple[Package | None, list[Problem]]:
    """Check a package and collect every problem; the Package is returned only when there is no error."""
    path = Path(path)
    if path.is_dir():
        root = path
    elif path.is_file():
        try:
            root = extract_package(path, cache_dir, limits=limits)
        except ArchiveError as exc:
            return None, [Problem(path.name, "", exc.message, exc.fix, code=exc.code)]
    else:
        return None, [Problem(path.name or str(path), "", "no such package directory or .bmad file",
                              "check the path", code="PACKAGE_NOT_FOUND")]
    docs, problems = check_package_dir(root)
    if docs is None:
        return None, problems
    package, model_problems = build_package(docs)
    return package, problems + model_problems


def build_package(docs: PackageDocs) -> tuple[Package | None, list[Problem]]:
    """Typed models from checked documents; pydantic problems (rare after the schemas) become Problems."""
    problems: list[Problem] = []
    agents: list[Agent] = []
    for i, raw in enumerate(docs.agents["agents"]):
        try:
            agents.append(Agent.model_validate(raw))
        except ValidationError as exc:
            problems += _model_problems(exc, docs.agents_path, ["agents", i])
    workflows: list[Workflow] = []
    for wf in docs.workflows:
        try:
            workflows.append(_workflow(wf))
        except ValidationError as exc:
            problems += _model_problems(exc, wf.graph_path, [])
    next_steps, next_problems = _next_steps(docs.root, {w.id for w in workflows}, {a.id for a in agents})
    problems += next_problems
    if problems:
        return None, problems
    manifest = docs.manifest
    description = manifest.get("description")
    return (
        Package(
            id=manifest["name"],
            name=manifest["name"],
            version=manifest["version"],
            description=description if isinstance(description, str) else None,
            root=docs.root,
            manifest=manifest,
            agents=agents,
            workflows=workflows,
            next_steps=next_steps,
        ),
        [],
    )


def _next_steps(root: Path, workflows: set[str], agents: set[str]) -> tuple[NextSteps | None, list[Problem]]:
    """The optional next-steps.json, checked against the package's own workflows and agents."""
    fix = "correct next-steps.json, or delete it (the package then offers no next steps)"
    try:
        found = read_next_steps(root)
    except ValueError as exc:
        return None, [Problem(NEXT_STEPS_FILE, "", str(exc), fix)]
    if found is None:
        return None, []
    return found, [Problem(NEXT_STEPS_FILE, where, what, fix) for where, what in found.problems(workflows, agents)]


def _workflow(wf: WorkflowDocs) -> Workflow:
    # node.file is rewritten to the package-root-relative path actually found (it may have been
    # written relative to the graph's folder), so `@pkg/<node.file>` always works downstream.
    graph_doc = dict(wf.graph)
    graph_doc["nodes"] = [{**n, "file": wf.node_files[n["id"]]} for n in wf.graph["nodes"]]
    steps = {
        nid: StepFile(path=s.path, frontmatter=s.frontmatter, body=s.body, text=s.text) for nid, s in wf.steps.items()
    }
    return Workflow(
        id=wf.id,
        display_name=wf.display_name,
        description=wf.description,
        workflow_path=wf.workflow_path,
        graph_path=wf.graph_path,
        graph=Graph.model_validate(graph_doc),
        template=wf.template,
        steps=steps,
    )


def _model_problems(exc: ValidationError, file: str, prefix: list[Any]) -> list[Problem]:
    return [
        Problem(file, json_path(prefix + [p for p in err["loc"] if p != "__root__"]), err["msg"],
                "correct the value to the documented type")
        for err in exc.errors()
    ]
