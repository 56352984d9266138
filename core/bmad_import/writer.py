"""Put an imported package on disk: a directory or a `.bmad` archive, validated before it lands.

The package is first written to a scratch folder next to the destination and checked with the
same validator `crewagent validate` uses; only a valid package replaces the destination, in one
rename (directory) or through the atomic archive writer (`.bmad`).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from core.package.archive import pack_package
from core.package.loader import validate_path
from core.package.problems import PackageInvalid

from .importer import BmadImportError, ImportResult

_MARKERS = ("bmad.json", "IMPORT-REPORT.md")


def write_package(result: ImportResult, out: Path) -> Path:
    """Write `result` to `out` (`*.bmad` = archive, anything else = directory); returns the path written."""
    out = out.resolve()
    if out.suffix != ".bmad" and out.exists() and not _replaceable(out):
        raise BmadImportError(f"{out.name} exists and is not an imported package; choose a new or empty folder")
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        staged = scratch / "package"
        _write_files(staged, result.files)
        with tempfile.TemporaryDirectory(prefix="crewagent-import-check-") as cache:
            package, problems = validate_path(staged, cache_dir=Path(cache))
        if package is None:
            raise PackageInvalid(problems)
        if out.suffix == ".bmad":
            return pack_package(staged, out)
        _replace_dir(staged, out, scratch)
        return out
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _replaceable(out: Path) -> bool:
    return out.is_dir() and (not any(out.iterdir()) or all((out / m).is_file() for m in _MARKERS))


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
