"""`.bmad` archives: unpack them without trusting a byte of them, and pack directories into them.

Extraction refuses every entry that could land outside the target (absolute names, `..`, NUL,
backslashes), every entry that is not a plain file or directory (symlinks, devices), encrypted
entries, and archives over the size and file-count caps. Sizes are checked twice: from the headers
before anything is written, and by counting the bytes actually decompressed. Work happens in a
hidden temp dir that is renamed into the cache only when complete, so the cache never holds a
half-extracted package.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import stat
import tempfile
import time
import zipfile
import zlib
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from crewagent.core.base.atomic import atomic_write_bytes
from crewagent.core.base.errors import CrewError

from .validate import PackageInvalid, Problem, check_package_dir

_CHUNK = 64 * 1024
_DRIVE = re.compile(r"^[A-Za-z]:")
_FIXED_TIME = (2020, 1, 1, 0, 0, 0)  # packed archives are byte-for-byte reproducible
_IGNORED_TOP = {"__MACOSX"}
# Never part of a package: version-control metadata and desktop litter. Other dot-files are packed
# (an `assets/.keep` is what keeps an empty folder in the archive).
_NOT_PACKED = frozenset({".git", ".hg", ".svn", ".DS_Store"})
_METHODS = {zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA}


@dataclass(frozen=True)
class ArchiveLimits:
    max_files: int = 2000
    max_total_bytes: int = 50 * 1024 * 1024
    max_file_bytes: int = 10 * 1024 * 1024
    max_archive_bytes: int = 64 * 1024 * 1024


DEFAULT_LIMITS = ArchiveLimits()


class ArchiveError(CrewError):
    """An archive that cannot be unpacked safely; the message names the entry, never a server path."""

    def __init__(self, message: str, fix: str, code: str = "PACKAGE_ARCHIVE_INVALID") -> None:
        super().__init__(code, message, {"fix": fix})
        self.fix = fix


def _mb(n: int) -> str:
    return f"{n / (1024 * 1024):g} MB"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def extract_package(archive: Path, cache_dir: Path | None = None, *, limits: ArchiveLimits = DEFAULT_LIMITS) -> Path:
    """Unpack `archive` into `cache_dir/<name>-<sha256[:12]>/` (or a new temp dir); return the package root.

    An archive already unpacked there (same bytes) is reused.
    """
    archive = Path(archive)
    try:
        size = archive.stat().st_size
    except OSError as exc:
        raise ArchiveError(f"the archive cannot be read ({exc.strerror})", "check the path and permissions") from None
    if size > limits.max_archive_bytes:
        raise ArchiveError(f"the archive is larger than {_mb(limits.max_archive_bytes)}",
                           "keep packages small; move bulky data out of the package", "PACKAGE_TOO_LARGE")
    digest = sha256_file(archive)[:12]
    parent = Path(cache_dir) if cache_dir is not None else Path(tempfile.mkdtemp(prefix="crewagent-pkg-"))
    parent.mkdir(parents=True, exist_ok=True)
    _sweep_abandoned(parent)
    cached = next((p for p in sorted(parent.glob(f"*-{digest}")) if p.is_dir() and not p.name.startswith(".")), None)
    if cached is not None:
        return package_root(cached)
    work = Path(tempfile.mkdtemp(prefix=".extract-", dir=parent))
    with ExitStack() as cleanup:  # the extraction folder goes, unless it became the cached package
        cleanup.callback(shutil.rmtree, work, ignore_errors=True)
        _extract_into(archive, work, limits)
        name = _dir_name(_manifest_name(package_root(work)) or archive.stem)
        final = parent / f"{name}-{digest}"
        try:
            os.rename(work, final)
        except OSError:
            if not final.is_dir():  # another process won the race only if the dir is there
                raise
        else:
            cleanup.pop_all()
    return package_root(final)


def _sweep_abandoned(parent: Path, max_age_seconds: float = 3600) -> None:
    """Remove extraction dirs left by a process killed mid-extraction (live ones are younger)."""
    now = time.time()
    for leftover in parent.glob(".extract-*"):
        try:
            if now - leftover.stat().st_mtime > max_age_seconds:
                shutil.rmtree(leftover, ignore_errors=True)
        except OSError:
            continue


def package_root(directory: Path) -> Path:
    """The dir holding bmad.json: the extraction dir, or its single top folder (zips of a folder)."""
    if (directory / "bmad.json").is_file():
        return directory
    entries = [p for p in directory.iterdir() if not p.name.startswith(".") and p.name not in _IGNORED_TOP]
    if len(entries) == 1 and entries[0].is_dir() and not entries[0].is_symlink():
        return entries[0]
    return directory


def _manifest_name(root: Path) -> str | None:
    try:
        name = json.loads((root / "bmad.json").read_text(encoding="utf-8-sig")).get("name")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return name if isinstance(name, str) and name.strip() else None


def _dir_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip(".-")
    return cleaned[:64] or "package"


def _entry_parts(name: str, is_dir: bool) -> list[str] | None:
    """Path segments of a safe entry name; None for a harmless empty dir entry like `./`."""
    if "\x00" in name:
        raise ArchiveError(f"entry {name!r} contains a NUL byte", "rebuild the archive with plain file names")
    if "\\" in name:
        raise ArchiveError(f"entry {name!r} contains a backslash",
                           "rebuild the archive with '/' as the path separator (crewagent pack does)")
    if name.startswith("/") or _DRIVE.match(name):
        raise ArchiveError(f"entry {name!r} has an absolute path", "store paths relative to the package root")
    raw = name.split("/")
    if is_dir and raw[-1] == "":
        raw = raw[:-1]
    parts: list[str] = []
    for part in raw:
        if part == "..":
            raise ArchiveError(f"entry {name!r} climbs out of the package with '..'",
                               "store paths relative to the package root, without '..'")
        if part == "":
            raise ArchiveError(f"entry {name!r} has an empty path segment", "rebuild the archive with clean paths")
        if part != ".":
            parts.append(part)
    if not parts and not is_dir:
        raise ArchiveError(f"entry {name!r} has no file name", "rebuild the archive with clean paths")
    return parts or None


def _entry_is_dir(info: zipfile.ZipInfo) -> bool:
    mode = info.external_attr >> 16
    kind = stat.S_IFMT(mode)
    if stat.S_ISLNK(mode):
        raise ArchiveError(f"entry {info.filename!r} is a symbolic link", "replace links with real files")
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
        raise ArchiveError(f"entry {info.filename!r} is not a regular file or directory",
                           "keep only files and folders in the package")
    if kind == stat.S_IFDIR and not info.is_dir():
        raise ArchiveError(f"entry {info.filename!r} claims to be a directory but has no trailing '/'",
                           "rebuild the archive with a standard zip tool")
    return info.is_dir()


def _plan(zf: zipfile.ZipFile, limits: ArchiveLimits) -> list[tuple[zipfile.ZipInfo, list[str], bool]]:
    infos = zf.infolist()
    if len(infos) > limits.max_files:
        raise ArchiveError(f"the archive has {len(infos)} entries; at most {limits.max_files} are allowed",
                           "remove files the package does not need", "PACKAGE_TOO_LARGE")
    plan, seen, declared = [], set(), 0
    for info in infos:
        is_dir = _entry_is_dir(info)
        parts = _entry_parts(info.filename, is_dir)
        if parts is None:
            continue
        if info.flag_bits & 0x1:
            raise ArchiveError(f"entry {info.filename!r} is encrypted", "pack the package without a password")
        if info.compress_type not in _METHODS:
            raise ArchiveError(f"entry {info.filename!r} uses an unsupported compression method",
                               "rebuild the archive with 'crewagent pack' (deflate)")
        key = "/".join(parts)
        if key in seen and not is_dir:
            raise ArchiveError(f"entry {info.filename!r} appears twice", "rebuild the archive")
        seen.add(key)
        if not is_dir:
            if info.file_size > limits.max_file_bytes:
                raise ArchiveError(f"entry {info.filename!r} is larger than {_mb(limits.max_file_bytes)}",
                                   "keep package files small", "PACKAGE_TOO_LARGE")
            declared += info.file_size
        plan.append((info, parts, is_dir))
    if declared > limits.max_total_bytes:
        raise ArchiveError(f"the archive unpacks to more than {_mb(limits.max_total_bytes)}",
                           "remove bulky files from the package", "PACKAGE_TOO_LARGE")
    return plan


def _extract_into(archive: Path, dest: Path, limits: ArchiveLimits) -> None:
    try:
        zf = zipfile.ZipFile(archive)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ArchiveError(f"not a readable zip archive ({exc})",
                           "pass a package directory or a .bmad file made by 'crewagent pack'") from None
    total = 0
    with zf:
        for info, parts, is_dir in _plan(zf, limits):
            target = dest.joinpath(*parts)
            try:
                if is_dir:
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                written = 0
                with zf.open(info) as src, open(target, "xb") as out:
                    while chunk := src.read(_CHUNK):
                        written += len(chunk)
                        total += len(chunk)
                        if written > limits.max_file_bytes or total > limits.max_total_bytes:
                            raise ArchiveError(f"entry {info.filename!r} unpacks to more than its size limit",
                                               "remove bulky files from the package", "PACKAGE_TOO_LARGE")
                        out.write(chunk)
            except ArchiveError:
                raise
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError) as exc:
                reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
                raise ArchiveError(f"entry {info.filename!r} cannot be unpacked ({reason})",
                                   "rebuild the archive with 'crewagent pack'") from None


def pack_package(src_dir: str | Path, out_file: str | Path, *, limits: ArchiveLimits = DEFAULT_LIMITS) -> Path:
    """Validate `src_dir`, then zip it (VCS metadata skipped, links refused) atomically into `out_file`.

    Raises PackageInvalid with every problem when the package or its files are not packable.
    """
    src = Path(src_dir).resolve()
    out = Path(out_file).resolve()
    _, problems = check_package_dir(src)
    files, file_problems = _collect(src, skip=out, limits=limits)
    problems += file_problems
    if any(p.level == "error" for p in problems):
        raise PackageInvalid(problems)
    packed = io.BytesIO()  # at most the limits' total size; one atomic write puts it in place
    with zipfile.ZipFile(packed, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for rel, path in files:
            info = zipfile.ZipInfo(rel, date_time=_FIXED_TIME)
            info.external_attr = (stat.S_IFREG | 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    atomic_write_bytes(out, packed.getvalue())
    return out


def _collect(src: Path, *, skip: Path, limits: ArchiveLimits) -> tuple[list[tuple[str, Path]], list[Problem]]:
    """Files to pack in a stable order, plus problems for links, special files and the caps."""
    files: list[tuple[str, Path]] = []
    problems: list[Problem] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        base = Path(dirpath)
        dirnames[:] = sorted(d for d in dirnames if d not in _NOT_PACKED)
        for name in [*dirnames, *sorted(filenames)]:
            path = base / name
            rel = path.relative_to(src).as_posix()
            if name in _NOT_PACKED or path == skip:
                continue
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                problems.append(Problem(rel, "", "is a symbolic link; packages cannot contain links",
                                        "replace the link with a copy of the file, or remove it"))
            elif stat.S_ISREG(info.st_mode):
                files.append((rel, path))
                total += info.st_size
                if info.st_size > limits.max_file_bytes:
                    problems.append(Problem(rel, "", f"is larger than {_mb(limits.max_file_bytes)}",
                                            "keep package files small"))
            elif not stat.S_ISDIR(info.st_mode):
                problems.append(Problem(rel, "", "is not a regular file", "remove it from the package directory"))
        dirnames[:] = [d for d in dirnames if not (base / d).is_symlink()]
    if len(files) > limits.max_files:
        problems.append(Problem(".", "", f"has {len(files)} files; at most {limits.max_files} can be packed",
                                "remove files the package does not need"))
    if total > limits.max_total_bytes:
        problems.append(Problem(".", "", f"holds more than {_mb(limits.max_total_bytes)}",
                                "remove bulky files from the package"))
    return files, problems
