"""BMAD's scripts in the package: which files of a `scripts/` folder are carried, and what each one needs.

BMAD v6.11+ skills run Python scripts with `uv run` (`{project-root}/_bmad/scripts/memlog.py`,
`{skill-root}/scripts/sprint_plan.py`). The import carries each `scripts/` folder a carried text
names or an imported skill holds, whole (a script imports its neighbours, e.g. `config_utils.py`),
without the folder's `tests/`, which only BMAD's own CI runs. The report lists every script with
the dependencies its PEP 723 block declares, so a team sees what the bot installs ahead of runs.
"""

from __future__ import annotations

import posixpath

from crewagent.core.package.script_metadata import ScriptMetadataError, parse_script_metadata

from .references import package_alias
from .report import ScriptLine
from .source import BmadSource

_SKIPPED_PARTS = ("tests", "__pycache__")


def script_folder(rel: str) -> str | None:
    """`core/bmad-x/scripts` for `core/bmad-x/scripts/a.py` (the nearest `scripts/` folder), else None."""
    parts = rel.split("/")[:-1]
    if "scripts" not in parts:
        return None
    last = len(parts) - 1 - parts[::-1].index("scripts")
    return "/".join(parts[: last + 1])


def is_script_test(rel: str) -> bool:
    """A file of a `scripts/` folder's `tests/` (or `__pycache__/`): never carried."""
    folder = script_folder(rel + ("x" if rel.endswith("/") else ""))
    if folder is None:
        return False
    inside = rel[len(folder) + 1:].split("/")[:-1]
    return any(part in _SKIPPED_PARTS for part in inside)


def script_folder_files(source: BmadSource, rel: str) -> list[str]:
    """Every file of the `scripts/` folder holding `rel` (tests left out); [] when `rel` is no script."""
    folder = script_folder(rel)
    if folder is None or not rel.endswith(".py"):
        return []
    return sorted(f for f in source.files if f.startswith(folder + "/") and not is_script_test(f))


def describe_scripts(files: dict[str, str | bytes]) -> list[ScriptLine]:
    """One line per carried Python script: its `@pkg` path and what its inline metadata asks for."""
    out: list[ScriptLine] = []
    for path, content in sorted(files.items()):
        rel = path.removeprefix("_bmad/")
        if not rel.endswith(".py") or script_folder(rel) is None:
            continue
        text = content.decode("utf-8", "replace") if isinstance(content, bytes) else content
        try:
            meta = parse_script_metadata(text)
        except ScriptMetadataError as exc:
            out.append(ScriptLine(path=package_alias(rel), problem=f"`uv run` refuses it: {exc}"))
            continue
        if meta is None:
            if posixpath.basename(rel).startswith("_") or "__main__" not in text:
                continue  # a helper module the scripts import (`config_utils.py`), not run on its own
            out.append(ScriptLine(path=package_alias(rel)))
            continue
        out.append(ScriptLine(path=package_alias(rel), dependencies=list(meta.dependencies),
                              requires_python=meta.requires_python or ""))
    return out
