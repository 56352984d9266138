"""Put an imported package on disk: a directory or a `.bmad` archive, validated before it lands.

The package is first written to a scratch folder next to the destination and checked with the
same validator `crewagent validate` uses; only a valid package replaces the destination, in one
rename (directory) or through the atomic archive writer (`.bmad`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from crewagent.core.package.archive import pack_package
from crewagent.core.package.loader import validate_path
from crewagent.core.package.problems import PackageInvalid

from .importer import BmadImportError, ImportResult

_MARKERS = ("bmad.json", "IMPORT-REPORT.md")
ARCHIVE_SUFFIXES = (".bmad", ".zip")  # `-o team.bmad` or `-o team.zip`: a package archive


class OutputExists(BmadImportError):
    """The output is already there and may not be replaced (without `replace`, or not an import at all)."""


def is_archive(out: Path) -> bool:
    return out.suffix.lower() in ARCHIVE_SUFFIXES


def write_package(result: ImportResult, out: Path, *, replace: bool = False) -> Path:
    """Write `result` to `out` (`*.bmad`/`*.zip` = archive, anything else = directory); returns the path written.

    An existing archive, or a folder holding an earlier import, is replaced only with `replace`; any
    other existing output never is (an empty folder counts as new).
    """
    typed = out
    out = out.resolve()
    _check_output(typed, out, replace)
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        staged = scratch / "package"
        _write_files(staged, result.files)
        with tempfile.TemporaryDirectory(prefix="crewagent-import-check-") as cache:
            package, problems = validate_path(staged, cache_dir=Path(cache))
        if package is None:
            raise PackageInvalid(problems)
        if is_archive(out):
            return pack_package(staged, out)
        _replace_dir(staged, out, scratch)
        return out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _check_output(typed: Path, out: Path, replace: bool) -> None:
    if not out.exists():
        return
    if is_archive(out):
        if out.is_dir():
            raise OutputExists(f"{typed} is a folder; an archive output needs a file name that is free")
        if not replace:
            raise OutputExists(f"{typed} already exists; add --force to replace it")
        return
    if not out.is_dir():
        raise OutputExists(f"{typed} is a file; give a folder name, or an OUT.bmad or OUT.zip archive")
    if not any(out.iterdir()):
        return
    if not all((out / m).is_file() for m in _MARKERS):
        raise OutputExists(f"{typed} exists and is not an imported package; choose a new or empty folder")
    if not replace:
        raise OutputExists(f"{typed} holds an earlier import; add --force to replace it")


def _write_files(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in sorted(files.items()):
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")


def _replace_dir(staged: Path, out: Path, scratch: Path) -> None:
    if out.exists():
        old = scratch / "previous"
        out.rename(old)
        try:
            staged.rename(out)
        except OSError:
            old.rename(out)
            raise
    else:
        staged.rename(out)
