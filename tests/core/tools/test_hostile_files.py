"""Pipes, sockets and devices in the project are refused, never opened in a way that can block."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from crewagent.core.session.router import DataRef
from crewagent.core.session.data import load_data
from crewagent.core.base.errors import CrewError
from tests.support.hostile import hostile_run_leaves_others_served, watchdog  # noqa: F401  (fixture)
from tests.support.tool_calls import call, err, make_ctx, mounts  # noqa: F401  (fixture)


async def test_reading_a_fifo_is_refused_and_other_threads_are_served(project: Path, watchdog: None) -> None:
    os.mkfifo(project / "pipe.md")
    [result] = await hostile_run_leaves_others_served(project, [("fs_read", {"path": "@project/pipe.md"})])
    assert result["ok"] is False and result["error"]["code"] == "E_NOT_REGULAR_FILE"
    assert "not a plain file" in result["error"]["message"]


async def test_every_tool_refuses_non_regular_files(mounts: Any, watchdog: None) -> None:  # noqa: F811
    ctx = make_ctx(mounts)
    os.mkfifo(mounts.project / "pipe.md")
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(mounts.project / "sock.md"))
        for path in ("@project/pipe.md", "@project/sock.md"):
            assert err(await call(ctx, "fs_read", {"path": path}))["code"] == "E_NOT_REGULAR_FILE"
            window = {"path": path, "startLine": 1, "endLine": 2}
            assert err(await call(ctx, "fs_read", window))["code"] == "E_NOT_REGULAR_FILE"
            patch = {"path": path, "patch": {"operation": "replace", "oldText": "a", "newText": "b"}}
            assert err(await call(ctx, "fs_apply_patch", patch))["code"] == "E_NOT_REGULAR_FILE"
            guarded = {"path": path, "content": "x", "ifMatchSha256": "0" * 64}
            assert err(await call(ctx, "fs_write", guarded))["code"] == "E_NOT_REGULAR_FILE"
        search = await call(ctx, "fs_search", {"path": "@project", "pattern": "x"})
        assert search.result["ok"] is True  # pipes and sockets are skipped by the walk
    finally:
        server.close()


async def test_a_data_file_that_is_a_fifo_is_refused(mounts: Any, watchdog: None) -> None:  # noqa: F811
    os.mkfifo(mounts.project / "data.json")
    try:
        await load_data(DataRef(path="@project/data.json", parse_as="json"), mounts, max_read_bytes=10_000)
    except CrewError as exc:
        assert exc.code == "DATA_LOAD_FAILED" and "not a plain file" in exc.message
    else:
        raise AssertionError("a FIFO was loaded as data")
