"""Unpacking hostile archives and packing directories: refusals, caps, atomicity, round trips."""

from __future__ import annotations

import os
import stat
import struct
import zipfile
from pathlib import Path

import pytest

from crewagent.core.package.archive import ArchiveError, ArchiveLimits, _entry_parts, pack_package
from crewagent.core.package.loader import PackageInvalid, load_package, validate_path
from tests.support.package_files import edit_json, files_under, make_package, package_entries, zip_entries


def _refused(tmp_path: Path, entries: list, expected: str, *, limits: ArchiveLimits | None = None) -> PackageInvalid:
    """Load a zip of a valid package plus `entries`; assert refusal and that nothing was written anywhere."""
    src = make_package(tmp_path / "src")
    archive = zip_entries(tmp_path / "hostile.bmad", package_entries(src) + entries)
    before = files_under(tmp_path)
    cache = tmp_path / "cache"
    with pytest.raises(PackageInvalid) as info:
        load_package(archive, cache_dir=cache, **({"limits": limits} if limits else {}))
    [problem] = info.value.problems
    assert problem.file == "hostile.bmad"
    assert expected in problem.message, problem
    assert files_under(cache) == []  # no half-extracted package left in the cache
    assert files_under(tmp_path) == sorted(before + ["cache"])  # and nothing landed anywhere else
    assert str(tmp_path) not in str(info.value.to_dict())
    return info.value


@pytest.mark.parametrize(
    "name, expected",
    [
        ("../evil", "climbs out of the package"),
        ("steps/../../evil", "climbs out of the package"),
        ("/tmp/evil", "absolute path"),
        ("C:/evil", "absolute path"),
        ("..\\evil", "backslash"),
        ("steps\\evil.md", "backslash"),
        ("steps//evil.md", "empty path segment"),
    ],
)
def test_unsafe_names_are_refused(tmp_path: Path, name: str, expected: str) -> None:
    _refused(tmp_path, [(name, b"pwned")], expected)
    assert not (tmp_path.parent / "evil").exists()


def test_nul_in_a_name_is_refused() -> None:
    # zipfile itself cuts names at NUL when reading, so the guard is checked directly.
    with pytest.raises(ArchiveError, match="NUL"):
        _entry_parts("steps/a\x00.md", False)
    assert _entry_parts("./steps/a.md", False) == ["steps", "a.md"]
    assert _entry_parts("./", True) is None


def test_symlink_entries_are_refused(tmp_path: Path) -> None:
    _refused(tmp_path, [("assets/passwd", b"/etc/passwd", stat.S_IFLNK | 0o777)], "is a symbolic link")


def test_special_file_entries_are_refused(tmp_path: Path) -> None:
    _refused(tmp_path, [("assets/pipe", b"", stat.S_IFIFO | 0o644)], "not a regular file or directory")


def test_too_many_files_are_refused(tmp_path: Path) -> None:
    _refused(tmp_path, [(f"assets/f{i}.txt", b"x") for i in range(2000)], "at most 2000 are allowed")


def test_an_oversized_file_is_refused(tmp_path: Path) -> None:
    _refused(tmp_path, [("assets/big.bin", bytes(10 * 1024 * 1024 + 1))], "larger than 10 MB")


def test_oversized_total_content_is_refused(tmp_path: Path) -> None:
    chunk = bytes(9 * 1024 * 1024)
    _refused(tmp_path, [(f"assets/part{i}.bin", chunk) for i in range(6)], "unpacks to more than 50 MB")


def test_custom_limits_apply(tmp_path: Path) -> None:
    _refused(tmp_path, [("assets/big.txt", b"y" * 5000)], "larger than", limits=ArchiveLimits(max_file_bytes=4096))


def test_lying_size_headers_are_caught_while_reading(tmp_path: Path) -> None:
    src = make_package(tmp_path / "src")
    archive = tmp_path / "liar.bmad"
    with zipfile.ZipFile(archive, "w") as zf:  # stored, so the payload is easy to find
        for name, data in package_entries(src):
            zf.writestr(name, data)
        zf.writestr("assets/bomb.txt", b"z" * 100_000)
    raw = bytearray(archive.read_bytes())
    name = b"assets/bomb.txt"
    for signature, size_at, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        pos = raw.find(signature)
        while pos != -1:
            if raw[pos + name_at : pos + name_at + len(name)] == name:
                struct.pack_into("<I", raw, pos + size_at, 10)  # claim 10 bytes
            pos = raw.find(signature, pos + 4)
    archive.write_bytes(bytes(raw))
    cache = tmp_path / "cache"
    with pytest.raises(PackageInvalid) as info:
        load_package(archive, cache_dir=cache)
    assert "assets/bomb.txt" in info.value.problems[0].message
    assert "cannot be unpacked" in info.value.problems[0].message
    assert files_under(cache) == []


def test_encrypted_entries_are_refused(tmp_path: Path) -> None:
    src = make_package(tmp_path / "src")
    archive = zip_entries(tmp_path / "locked.bmad", package_entries(src))
    raw = bytearray(archive.read_bytes())
    pos = raw.find(b"PK\x01\x02")
    struct.pack_into("<H", raw, pos + 8, struct.unpack_from("<H", raw, pos + 8)[0] | 0x1)
    archive.write_bytes(bytes(raw))
    _, problems = validate_path(archive, cache_dir=tmp_path / "cache")
    assert "is encrypted" in problems[0].message


def test_a_file_that_is_not_a_zip_is_one_clear_problem(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.bmad"
    bogus.write_text("hello", encoding="utf-8")
    package, problems = validate_path(bogus, cache_dir=tmp_path / "cache")
    assert package is None
    assert [(p.file, p.code) for p in problems] == [("notes.bmad", "PACKAGE_ARCHIVE_INVALID")]
    assert "not a readable zip archive" in problems[0].message


def test_a_missing_path_is_one_clear_problem(tmp_path: Path) -> None:
    _, problems = validate_path(tmp_path / "nope")
    assert [(p.file, p.code) for p in problems] == [("nope", "PACKAGE_NOT_FOUND")]


def test_classic_workflow_inside_a_zip_is_not_supported(tmp_path: Path) -> None:
    archive = zip_entries(tmp_path / "classic.bmad", [("dev/workflow.yaml", b"name: dev\n"), ("dev/instructions.xml", b"<x/>")])
    with pytest.raises(PackageInvalid) as info:
        load_package(archive, cache_dir=tmp_path / "cache")
    assert info.value.code == "NOT_SUPPORTED_CLASSIC_WORKFLOW"


# --- packing ------------------------------------------------------------------------------


def test_pack_then_load_round_trip(tmp_path: Path) -> None:
    src = make_package(tmp_path / "mini")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref", encoding="utf-8")
    (src / ".DS_Store").write_bytes(b"\0")
    (src / "assets" / "empty").mkdir()
    (src / "assets" / "empty" / ".keep").write_bytes(b"")  # what keeps an empty folder in the archive
    (src / ".crewagent-notes").write_text("authors' notes", encoding="utf-8")
    out = pack_package(src, tmp_path / "dist" / "mini.bmad")
    assert out == (tmp_path / "dist" / "mini.bmad").resolve()
    with zipfile.ZipFile(out) as zf:
        names = zf.namelist()
        assert all(stat.S_ISREG(i.external_attr >> 16) for i in zf.infolist())
    assert "bmad.json" in names and "steps/decide-02.md" in names and "assets/notes.md" in names
    assert "assets/empty/.keep" in names and ".crewagent-notes" in names  # dot-files are kept
    assert not any(n.startswith((".git", ".DS_Store")) for n in names)  # VCS metadata and litter are not
    packed = load_package(out, cache_dir=tmp_path / "cache")
    assert (packed.root / "assets" / "empty").is_dir()
    direct = load_package(src)
    assert packed.model_dump(exclude={"root"}) == direct.model_dump(exclude={"root"})
    assert files_under(out.parent) == ["mini.bmad"]  # the temp file was renamed, not left behind


def test_pack_is_reproducible_and_can_write_inside_the_package(tmp_path: Path) -> None:
    src = make_package(tmp_path / "mini")
    first = pack_package(src, src / "mini.bmad").read_bytes()
    second = pack_package(src, src / "mini.bmad").read_bytes()  # the earlier output is not packed into itself
    assert first == second
    with zipfile.ZipFile(src / "mini.bmad") as zf:
        assert "mini.bmad" not in zf.namelist()


def test_pack_refuses_an_invalid_package_and_writes_nothing(tmp_path: Path) -> None:
    src = make_package(tmp_path / "mini")
    edit_json(src / "workflow.graph.json", lambda g: g.update(entryNodeId="nope"))
    with pytest.raises(PackageInvalid) as info:
        pack_package(src, tmp_path / "out" / "mini.bmad")
    assert [p.json_path for p in info.value.errors] == ["$.entryNodeId"]
    assert not (tmp_path / "out").exists() or files_under(tmp_path / "out") == []


def test_pack_refuses_symlinks(tmp_path: Path) -> None:
    src = make_package(tmp_path / "mini")
    outside = tmp_path / "outside.md"
    outside.write_text("secret", encoding="utf-8")
    os.symlink(outside, src / "assets" / "linked.md")
    os.symlink(tmp_path, src / "assets" / "linked-dir")
    with pytest.raises(PackageInvalid) as info:
        pack_package(src, tmp_path / "mini.bmad")
    assert sorted(p.file for p in info.value.errors) == ["assets/linked-dir", "assets/linked.md"]
    assert all("symbolic link" in p.message for p in info.value.errors)
    assert not (tmp_path / "mini.bmad").exists()


def test_abandoned_extractions_are_swept(tmp_path: Path) -> None:
    archive = pack_package(make_package(tmp_path / "mini"), tmp_path / "mini.bmad")
    cache = tmp_path / "cache"
    (cache / ".extract-old").mkdir(parents=True)
    (cache / ".extract-old" / "bmad.json").write_text("{}", encoding="utf-8")
    os.utime(cache / ".extract-old", (0, 0))
    (cache / ".extract-live").mkdir()
    package = load_package(archive, cache_dir=cache)
    assert sorted(p.name for p in cache.iterdir()) == [".extract-live", package.root.name]
