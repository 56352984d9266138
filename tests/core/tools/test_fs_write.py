"""fs_write and fs_apply_patch as root: what lands in @project belongs to the folder's owner (the
unprivileged user commands run as), so a command can edit what an agent wrote. Needs root."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.support.shell_sandbox import make_bench

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: files are made for another owner")


async def test_new_files_and_folders_take_their_folders_owner(tmp_path: Path) -> None:
    bench = make_bench(tmp_path)
    os.chown(bench.project, NOBODY, NOBODY)
    wrote = await bench.tool("fs_write", path="@project/docs/deep/new.md", content="written by an agent\n")
    assert wrote["ok"], wrote
    for made in (bench.project / "docs", bench.project / "docs" / "deep", bench.project / "docs" / "deep" / "new.md"):
        st = made.stat()
        assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY), made
    assert [p.name for p in (bench.project / "docs" / "deep").iterdir()] == ["new.md"]  # no temp file left


async def test_a_rewritten_file_takes_its_folders_owner_and_loses_setuid(tmp_path: Path) -> None:
    bench = make_bench(tmp_path)
    tool = bench.project / "tool.sh"
    tool.write_text("echo one\n")
    tool.chmod(0o4755)  # root's file with the setuid bit, as the shell of an unconfined command could leave it
    os.chown(bench.project, NOBODY, NOBODY)
    patch = {"operation": "replace", "oldText": "one", "newText": "two"}
    assert (await bench.tool("fs_apply_patch", path="@project/tool.sh", patch=patch))["ok"]
    st = tool.stat()
    assert (st.st_uid, st.st_gid) == (NOBODY, NOBODY) and stat.S_IMODE(st.st_mode) == 0o755
    assert (await bench.tool("fs_write", path="@project/tool.sh", content="echo three\n"))["ok"]
    st = tool.stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o755) and tool.read_text() == "echo three\n"


async def test_run_state_stays_the_bots(tmp_path: Path) -> None:
    bench = make_bench(tmp_path)
    os.chown(bench.state, NOBODY, NOBODY)  # only @project is shared with commands
    assert (await bench.tool("fs_write", path="@state/notes.md", content="x\n"))["ok"]
    assert (bench.state / "notes.md").stat().st_uid == 0
