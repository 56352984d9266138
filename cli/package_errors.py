"""How the terminal commands report a package that cannot be used, with the next command to type."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import TextIO

from crewagent.core.api.packages import bmad_tree_kind, Problem


def bmad_tree_advice(path: Path) -> str | None:
    """For a BMAD-METHOD tree: what it is and the import command for exactly the path the user typed."""
    kind = bmad_tree_kind(path)
    if kind is None:
        return None
    out = import_output_name(path)
    return (
        f"{path} is {kind}, not a .bmad package. Import it first, then use the package:\n"
        f"  crewagent import bmad {shlex.quote(str(path))} -o {shlex.quote(out)}\n"
        f"  crewagent validate {shlex.quote(out)}"
    )


def import_output_name(path: Path) -> str:
    """A sensible OUT for `crewagent import bmad PATH -o OUT`: named after the tree, not `src` or `_bmad`."""
    resolved = path.resolve()
    name = resolved.name
    if name in ("src", "_bmad") and resolved.parent.name:
        name = resolved.parent.name
    return f"{name or 'team'}.bmad"


def print_invalid(path: Path, problems: list[Problem], stream: TextIO | None = None) -> None:
    """`error: PATH is not a valid package:` with its errors; a BMAD tree gets the import command instead."""
    stream = stream or sys.stderr
    errors = [p for p in problems if p.level == "error"]
    advice = bmad_tree_advice(path)
    if advice is not None:
        print(f"error: {advice}", file=stream)
        return
    print(f"error: {path} is not a valid package:", file=stream)
    for problem in errors:
        print(f"  {problem}", file=stream)
