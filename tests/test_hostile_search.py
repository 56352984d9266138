"""A hostile fs_search (catastrophic regex, huge trees) never freezes the bot for other threads."""

from __future__ import annotations

import asyncio
import faulthandler
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.tools.base import EffectivePolicy
from core.tools.fs_search import SMALL_SEARCH_FILES
from tests.fakes import Reply
from tests.scripts import Body, calls, hello_linear_responder, previous_calls, previous_results, write
from tests.test_bot_support import bot_harness, message_text
from tests.test_tools import _big_tree, call, err, make_ctx, mounts  # noqa: F401  (fixture)

REDOS_TEXT = "a" * 34 + "!"
REDOS_PATTERN = "/(a+)+$/"  # exponential for a backtracking engine on REDOS_TEXT
WATCHDOG_SECONDS = 60.0


@pytest.fixture
def watchdog() -> Iterator[None]:
    """Turn a call that holds the GIL for good (a backtracking regex, a YAML bomb) into a failure, not a hang.

    faulthandler's timer thread needs no GIL: past the bound it prints every thread's stack (showing
    where the process was stuck) and ends the test process with exit status 1.
    """
    faulthandler.dump_traceback_later(WATCHDOG_SECONDS, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


async def test_catastrophic_regex_does_not_stop_other_threads(project: Path, watchdog: None) -> None:
    searched: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
    release = asyncio.Event()
    normal = hello_linear_responder()
    asked: list[Body] = []

    async def respond(body: Body) -> Reply:
        asked.append(body)
        made = [name for name, _ in previous_calls(body)]
        if made == ["fs_write", "fs_search"]:
            if not searched.done():
                searched.set_result(previous_results(body)[-1])
            await release.wait()  # the hostile run stays in flight while the other thread is served
            return normal(body)
        if len(asked) == 1:
            return calls(
                write("@project/redos.txt", REDOS_TEXT),
                ("fs_search", {"path": "@project/redos.txt", "pattern": REDOS_PATTERN}),
            )
        return normal(body)

    async with bot_harness(project, ["multi-workflows"]) as h:
        h.llm.responder = respond
        try:
            hostile = await h.mention("hello-linear")
            result = await asyncio.wait_for(searched, 30)
            assert result["ok"] is True and result["matches"] == []

            mark = h.mark()
            other = await h.mention("Mary", channel="C9")  # answered with 200 (acked) by the HTTP front door
            await h.posted(lambda p: p.get("channel") == "C9" and p.get("thread_ts") == other, since=mark)
        finally:
            release.set()
        await h.posted(lambda p: "What is the topic?" in message_text(p) and p.get("thread_ts") == hostile)


async def test_regex_search_of_a_big_tree_is_linear_with_and_without_ripgrep(
    mounts: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, watchdog: None  # noqa: F811
) -> None:
    _big_tree(mounts.project, SMALL_SEARCH_FILES + 5)
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
    _big_tree(mounts.project, SMALL_SEARCH_FILES + 5)
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
