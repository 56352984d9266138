"""Folders people point at by mistake: a BMAD-METHOD tree is not a package until it is imported.

Told apart cheaply (a few stat calls) so `validate`, `run` and `chat` can say "import it with
`crewagent import bmad`" instead of "add bmad.json".
"""

from __future__ import annotations

from pathlib import Path

from .problems import CLASSIC_CODE, Problem

BMAD_TREE_CODE = "BMAD_TREE_NOT_A_PACKAGE"
CLASSIC_FILES = ("workflow.yaml", "workflow.yml", "instructions.xml")


def missing_manifest(root: Path) -> Problem:
    """Why a folder without bmad.json is no package, with the fix that applies to what it is."""
    classic = classic_workflow_files(root)
    if classic:
        return Problem(classic[0], "",
                       "this is a classic BMAD workflow (workflow.yaml / instructions.xml); only .bmad v1.1 "
                       "micro-file packages (bmad.json + workflow.graph.json + steps/*.md) run here",
                       "convert the workflow to a v1.1 micro-file package", code=CLASSIC_CODE)
    kind = bmad_tree_kind(root)
    if kind is not None:
        return Problem("bmad.json", "", f"this folder is {kind}, not a .bmad package",
                       "turn it into a package with `crewagent import bmad PATH -o OUT.bmad`", code=BMAD_TREE_CODE)
    return Problem("bmad.json", "", "the package has no bmad.json manifest at its root",
                   "add bmad.json (schemaVersion, name, version, entry) at the package root", code="FILE_MISSING")


def classic_workflow_files(root: Path) -> list[str]:
    """Classic BMAD entry files at the root or in workflows/*/ (package-relative)."""
    found = [name for name in CLASSIC_FILES if (root / name).is_file()]
    workflows = root / "workflows"
    if workflows.is_dir():
        for sub in sorted(p for p in workflows.iterdir() if p.is_dir()):
            found += [f"workflows/{sub.name}/{n}" for n in CLASSIC_FILES if (sub / n).is_file()]
    return found


def bmad_tree_kind(root: Path) -> str | None:
    """What kind of BMAD-METHOD tree `root` is, as words for a message; None when it is none."""
    if not root.is_dir() or (root / "bmad.json").is_file():
        return None
    if (root / "_bmad").is_dir() and _has_modules(root / "_bmad"):
        return "a project with an installed BMAD-METHOD _bmad/ folder"
    if _has_modules(root):
        return "an installed BMAD-METHOD _bmad/ folder" if _installed(root) else "a BMAD-METHOD source tree"
    if (root / "src").is_dir() and _has_modules(root / "src"):
        return "a BMAD-METHOD checkout (its src/ folder holds the modules)"
    return None


def _has_modules(folder: Path) -> bool:
    try:
        subdirs = [d for d in folder.iterdir() if d.is_dir() and not d.name.startswith(".")]
    except OSError:
        return False
    return any(_is_module(d) for d in subdirs)


def _is_module(folder: Path) -> bool:
    if (folder / "module.yaml").is_file():
        return True
    return (folder / "config.yaml").is_file() and ((folder / "agents").is_dir() or (folder / "workflows").is_dir())


def _installed(folder: Path) -> bool:
    return folder.name == "_bmad" or (folder / "_config").is_dir()
