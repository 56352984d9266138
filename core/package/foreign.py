"""Folders people point at by mistake: a BMAD-METHOD tree is not a package until it is imported.

Told apart cheaply (a few stat calls) so `validate`, `run` and `chat` can say "import it with
`crewagent import bmad`" instead of "add bmad.json".
"""

from __future__ import annotations

from pathlib import Path

BMAD_TREE_CODE = "BMAD_TREE_NOT_A_PACKAGE"


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


def import_output_name(path: Path) -> str:
    """A sensible OUT for `crewagent import bmad PATH -o OUT`: named after the tree, not `src` or `_bmad`."""
    resolved = path.resolve()
    name = resolved.name
    if name in ("src", "_bmad") and resolved.parent.name:
        name = resolved.parent.name
    return f"{name or 'team'}.bmad"


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
