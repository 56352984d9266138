"""A hostile fs_search (catastrophic regex, huge trees) never freezes the bot for other threads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crewagent.core.tools.base import EffectivePolicy
from crewagent.core.tools.fs_search import SMALL_SEARCH_FILES
from tests.support.hostile import hostile_run_leaves_others_served, watchdog  # noqa: F401  (fixture)
from tests.support.scripts import write
from tests.support.tool_calls import big_tree, call, err, make_ctx, mounts  # noqa: F401  (fixture)

REDOS_TEXT = "a" * 34 + "!"
REDOS_PATTERN = "/(a+)+$/"  # exponential for a backtracking engine on REDOS_TEXT


async def test_catastrophic_regex_does_not_stop_other_threads(project: Path, watchdog: None) -> None:
    hostile = [
        write("@project/redos.txt", REDOS_TEXT),
        ("fs_search", {"path": "@project/redos.txt", "pattern": REDOS_PATTERN}),
    ]
    written, searched = await hostile_run_leaves_others_served(project, hostile)
    assert written["ok"] is True
    assert searched["ok"] is True and searched["matches"] == []


async def test_regex_search_of_a_big_tree_is_linear_with_and_without_ripgrep(
    mounts: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, watchdog: None  # noqa: F811
) -> None:
    big_tree(mounts.project, SMALL_SEARCH_FILES + 5)
    (mounts.project / "big" / "redos.md").write_text(REDOS_TEXT + "\n")
    ctx = make_ctx(mounts)
    args = {"path": "@project/big", "pattern": REDOS_PATTERN}
    assert (await call(ctx, "fs_search", args)).result["matches"] == []
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))  # the Python walk
    assert (await call(ctx, "fs_search", args)).result["matches"] == []


@pytest.mark.parametrize("with_ripgrep", [True, False])
async def test_a_search_past_its_deadline_is_an_error_value(
    mounts: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, with_ripgrep: bool  # noqa: F811
) -> None:
    big_tree(mounts.project, SMALL_SEARCH_FILES + 5)
    if not with_ripgrep:
        monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))
    ctx = make_ctx(mounts, policy=EffectivePolicy(max_search_seconds=0.0))
    error = err(await call(ctx, "fs_search", {"path": "@project/big", "pattern": "needle"}))
    assert error["code"] == "E_TIMEOUT" and "stopped after 0 seconds" in error["message"]


async def test_unsupported_regex_features_are_refused_with_a_reason(mounts: Any) -> None:  # noqa: F811
    ctx = make_ctx(mounts)
    for pattern in ("/(a)\\1/", "/(?=a)b/", "/(?<!x)y/"):
        error = err(await call(ctx, "fs_search", {"path": "@project", "pattern": pattern}))
        assert error["code"] == "E_INVALID_ARGS" and "Look-around and back-references" in error["message"]
