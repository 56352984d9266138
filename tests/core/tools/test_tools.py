"""The seven tools as the model sees them: arguments, results, limits, availability and audit."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from crewagent.core.base.atomic import append_line, atomic_write_text
from crewagent.core.tools.mounts import resolve
from crewagent.core.package.models import Agent
from crewagent.core.tools.policy import SystemToolPolicy, effective_policy
from crewagent.core.tools.args import SearchArgs
from crewagent.core.tools.audit import MAX_RESULT_CHARS
from crewagent.core.tools.base import EffectivePolicy, Mounts
from crewagent.core.tools.fs_search import (
    SMALL_SEARCH_FILES,
    SmallSearch,
    make_matcher,
    python_search,
    result_of,
    rg_search,
    small_search,
    targets_for,
)
from crewagent.core.tools.registry import ToolHost, canonical_name, wire_name
from tests.support.tool_calls import big_tree, call, err, make_ctx, mounts  # noqa: F401  (fixture)

ALL_TOOLS = ["fs_read", "fs_list", "fs_search", "fs_write", "fs_apply_patch", "ui_ask_user", "workflow_rewind"]


# --- fs_read ------------------------------------------------------------------------------------------


async def test_read_whole_file(mounts: Mounts) -> None:
    data = (mounts.project / "readme.md").read_bytes()
    out = (await call(make_ctx(mounts), "fs_read", {"path": "@project/readme.md"})).result
    assert out == {
        "ok": True,
        "path": "@project/readme.md",
        "bytes": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "truncated": False,
        "content": data.decode(),
    }


async def test_read_over_the_limit_is_truncated_with_a_hint(mounts: Mounts) -> None:
    big = "é" * 3000  # two bytes each: the cut must not split a character
    (mounts.project / "big.md").write_text(big)
    ctx = make_ctx(mounts, policy=EffectivePolicy(max_read_bytes=1001))
    out = (await call(ctx, "fs_read", {"path": "@project/big.md"})).result
    assert out["ok"] and out["truncated"] is True and "content" not in out
    assert out["contentPreview"] == "é" * 500
    assert out["bytes"] == 6000 and out["sha256"] == hashlib.sha256(big.encode()).hexdigest()
    assert "fs_search" in out["hint"] and "startLine" in out["hint"]


async def test_huge_result_is_cut_below_the_json_cap(mounts: Mounts) -> None:
    (mounts.project / "huge.md").write_text("line with \"quotes\"\n" * 10_000)
    outcome = await call(make_ctx(mounts), "fs_read", {"path": "@project/huge.md"})
    text = json.dumps(outcome.result)
    assert len(text) <= MAX_RESULT_CHARS
    out = json.loads(text)
    assert out["truncated"] is True and out["contentPreview"].startswith("line with")
    assert "startLine" in out["hint"]


async def test_read_windows(mounts: Mounts) -> None:
    ctx = make_ctx(mounts)
    out = (await call(ctx, "fs_read", {"path": "@project/docs/guide.md", "startLine": 2, "endLine": 3})).result
    assert out["content"] == "setup\nNeedle in caps\n"
    assert (out["startLine"], out["endLine"], out["totalLines"]) == (2, 3, 6)
    assert out["sha256"] == hashlib.sha256((mounts.project / "docs" / "guide.md").read_bytes()).hexdigest()
    tail = (await call(ctx, "fs_read", {"path": "@project/docs/guide.md", "startLine": 5})).result
    assert tail["content"] == "needle again\nend\n" and tail["endLine"] == 6
    past = (await call(ctx, "fs_read", {"path": "@project/docs/guide.md", "startLine": 40})).result
    assert past["content"] == "" and "6 lines" in past["hint"]
    bad = err(await call(ctx, "fs_read", {"path": "@project/docs/guide.md", "startLine": 4, "endLine": 2}))
    assert bad["code"] == "E_INVALID_ARGS" and "endLine" in bad["message"]


async def test_window_over_the_limit_stops_at_a_line(mounts: Mounts) -> None:
    (mounts.project / "lines.md").write_text("".join(f"line {i:04d}\n" for i in range(1, 201)))
    ctx = make_ctx(mounts, policy=EffectivePolicy(max_read_bytes=100))
    out = (await call(ctx, "fs_read", {"path": "@project/lines.md", "startLine": 10, "endLine": 50})).result
    assert out["truncated"] is True and out["contentPreview"].startswith("line 0010\n")
    assert out["endLine"] == 19 and "line 20" in out["hint"]


async def test_read_missing_and_folder(mounts: Mounts) -> None:
    ctx = make_ctx(mounts)
    missing = err(await call(ctx, "fs_read", {"path": "@project/artifacts/sprint-status.yaml"}))
    assert missing == {"code": "ENOENT", "message": "File not found: @project/artifacts/sprint-status.yaml"}
    folder = err(await call(ctx, "fs_read", {"path": "@project/docs"}))
    assert "fs_list" in folder["message"]


# --- fs_list -------------------------------------------------------------------------------------------


async def test_list_marks_folders_and_skips_hidden_and_symlinks(mounts: Mounts) -> None:
    (mounts.project / "link.md").symlink_to(mounts.project / "readme.md")
    out = (await call(make_ctx(mounts), "fs_list", {"path": "@project"})).result
    assert out == {
        "ok": True,
        "path": "@project",
        "entries": ["artifacts/", "docs/", "node_modules/", "readme.md"],
        "truncated": False,
    }


async def test_list_truncates_with_a_hint(mounts: Mounts) -> None:
    for i in range(12):
        (mounts.project / "artifacts" / f"f{i:02d}.md").write_text("x")
    ctx = make_ctx(mounts, policy=EffectivePolicy(max_list_entries=5))
    out = (await call(ctx, "fs_list", {"path": "@project/artifacts"})).result
    assert out["truncated"] is True and out["entriesPreview"] == [f"f{i:02d}.md" for i in range(5)]
    assert "12 entries" in out["hint"]
    assert err(await call(ctx, "fs_list", {"path": "@project/nope"}))["code"] == "ENOENT"


# --- fs_search -----------------------------------------------------------------------------------------


def _lines(result: dict[str, Any]) -> list[tuple[str, int]]:
    return sorted((m["path"], m["line"]) for m in result["matches"])


async def test_search_substring_skips_hidden_deps_and_binaries(mounts: Mounts) -> None:
    out = (await call(make_ctx(mounts), "fs_search", {"path": "@project", "pattern": "needle"})).result
    assert _lines(out) == [
        ("@project/docs/deep/notes.txt", 1),
        ("@project/docs/guide.md", 5),
        ("@project/readme.md", 2),
    ]
    first = next(m for m in out["matches"] if m["path"] == "@project/readme.md")
    assert first == {
        "path": "@project/readme.md",
        "line": 2,
        "column": 5,
        "text": "the needle is here",
        "before": ["Title"],
        "after": ["last line"],
    }
    assert out["truncated"] is False and out["stats"]["matchesFound"] == 3


async def test_search_regex_ignore_case_and_context(mounts: Mounts) -> None:
    args = {"path": "@project/docs/guide.md", "pattern": "/^needle/i", "before": 2, "after": 0}
    out = (await call(make_ctx(mounts), "fs_search", args)).result
    assert [(m["line"], m["before"], m["after"]) for m in out["matches"]] == [
        (3, ["intro", "setup"], []),
        (5, ["Needle in caps", "more"], []),
    ]


async def test_search_legacy_query_and_globs(mounts: Mounts) -> None:
    ctx = make_ctx(mounts)
    out = (await call(ctx, "fs_search", {"query": "needle", "globs": ["@project/docs/*.md"]})).result
    assert _lines(out) == [("@project/docs/guide.md", 5)]
    rel = (await call(ctx, "fs_search", {"query": "needle", "path": "@project/docs", "globs": ["*.txt"]})).result
    assert _lines(rel) == [("@project/docs/deep/notes.txt", 1)]
    one = (await call(ctx, "fs_search", {"query": "needle", "globs": ["@project/readme.md"]})).result
    assert _lines(one) == [("@project/readme.md", 2)]


async def test_search_stops_at_max_matches(mounts: Mounts) -> None:
    (mounts.project / "many.md").write_text("hit\n" * 30)
    out = (await call(make_ctx(mounts), "fs_search", {"path": "@project/many.md", "pattern": "hit", "maxMatches": 7})).result
    assert len(out["matches"]) == 7 and out["truncated"] is True and "7 matches" in out["hint"]


async def test_search_bad_regex_and_missing_path(mounts: Mounts) -> None:
    ctx = make_ctx(mounts)
    assert err(await call(ctx, "fs_search", {"pattern": "/(unclosed/"}))["code"] == "E_INVALID_ARGS"
    assert err(await call(ctx, "fs_search", {"path": "@project/nowhere", "pattern": "x"}))["code"] == "ENOENT"


def test_python_walk_gives_the_same_results_as_the_tool(mounts: Mounts) -> None:
    ctx = make_ctx(mounts)
    args = SearchArgs(path="@project", pattern="/needle/i", before=1, after=1)
    found = python_search(targets_for(args, ctx), make_matcher(args.pattern), 1, 1, 50)
    result = result_of("@project", found, 50)
    assert _lines(result) == [
        ("@project/docs/deep/notes.txt", 1),
        ("@project/docs/guide.md", 3),
        ("@project/docs/guide.md", 5),
        ("@project/readme.md", 2),
    ]
    assert result["stats"]["filesScanned"] == 4  # readme, guide, notes, blob.bin (binary); nothing hidden


def test_small_searches_are_scanned_in_process_and_big_ones_are_not(mounts: Mounts) -> None:
    ctx = make_ctx(mounts)

    def plan(path: str, **limits: int) -> SmallSearch | None:
        return small_search(targets_for(SearchArgs(path=path, pattern="x"), ctx), **limits)

    one = plan("@project/readme.md")
    assert one is not None and one.files == [(str(mounts.project / "readme.md"), "@project/readme.md")]
    tree = plan("@project")
    assert tree is not None and sorted(alias for _, alias in tree.files) == [
        "@project/docs/blob.bin", "@project/docs/deep/notes.txt", "@project/docs/guide.md", "@project/readme.md"
    ]
    assert plan("@project", max_files=3) is None
    assert plan("@project", max_bytes=40) is None
    assert plan("@project", max_entries=5) is None  # .git, node_modules and hidden entries count as looked at
    big_tree(mounts.project, SMALL_SEARCH_FILES + 1)
    assert plan("@project/big") is None


def test_ripgrep_comes_with_the_install() -> None:
    """The `ripgrep` wheel puts `rg` beside the interpreter's scripts, where fs_search finds it on PATH."""
    rg = shutil.which("rg")
    assert rg is not None, "rg is not on PATH: install the package (pip install -e .) and activate its virtualenv"
    version = subprocess.run([rg, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    assert version.startswith("ripgrep ")


async def test_ripgrep_and_python_walk_agree(mounts: Mounts) -> None:
    big_tree(mounts.project, 20)
    ctx = make_ctx(mounts)
    rg = shutil.which("rg")
    assert rg is not None
    for pattern in ("needle", "/needle/i", "/^[a-z]+$/"):
        targets = targets_for(SearchArgs(path="@project", pattern=pattern), ctx)
        via_rg = await rg_search(rg, targets, make_matcher(pattern), 1, 2, 500)
        walk = python_search(targets, make_matcher(pattern), 1, 2, 500)
        assert via_rg is not None and walk.matches
        key = lambda m: (m["path"], m["line"])  # noqa: E731
        assert sorted(via_rg.matches, key=key) == sorted(walk.matches, key=key)


async def test_big_trees_give_the_same_results_with_or_without_ripgrep(
    mounts: Mounts, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    big_tree(mounts.project, SMALL_SEARCH_FILES + 10)
    ctx = make_ctx(mounts)
    args = {"path": "@project/big", "pattern": "/^needle 1[0-9]$/", "before": 1}
    default = (await call(ctx, "fs_search", args)).result
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools-here"))  # no ripgrep: the Python walk, in a thread
    without = (await call(ctx, "fs_search", args)).result
    key = lambda m: (m["path"], m["line"])  # noqa: E731
    assert sorted(m["text"] for m in without["matches"]) == [f"needle {i}" for i in (10, 11, 13, 14, 16, 17, 19)]
    assert sorted(default["matches"], key=key) == sorted(without["matches"], key=key)
    assert default["truncated"] is without["truncated"] is False


async def test_ripgrep_runs_leave_no_unknown_child_warnings(mounts: Mounts, caplog: pytest.LogCaptureFixture) -> None:
    big_tree(mounts.project, SMALL_SEARCH_FILES + 10)
    ctx = make_ctx(mounts)
    with caplog.at_level(logging.WARNING, logger="asyncio"):
        for n in range(30):  # alternately read to the end, and stopped early at the match limit
            args = {"path": "@project", "pattern": "needle", "maxMatches": 3 + 40 * (n % 2)}
            out = (await call(ctx, "fs_search", args)).result
            assert out["ok"] is True
    assert [r.getMessage() for r in caplog.records if "child process" in r.getMessage()] == []


# --- fs_write and fs_apply_patch -----------------------------------------------------------------------


async def test_write_creates_folders_atomically(mounts: Mounts) -> None:
    out = (await call(make_ctx(mounts), "fs_write", {"path": "@project/docs/new/a.md", "content": "hi ✓"})).result
    assert out == {
        "ok": True,
        "path": "@project/docs/new/a.md",
        "bytesWritten": len("hi ✓".encode()),
        "sha256After": hashlib.sha256("hi ✓".encode()).hexdigest(),
    }
    assert os.listdir(mounts.project / "docs" / "new") == ["a.md"]  # no temp file left behind


async def test_write_over_the_limit_fails_and_writes_nothing(mounts: Mounts) -> None:
    ctx = make_ctx(mounts, policy=EffectivePolicy(max_write_bytes=10))
    error = err(await call(ctx, "fs_write", {"path": "@project/artifacts/long.md", "content": "x" * 11}))
    assert error["code"] == "E_WRITE_LIMIT" and error["details"] == {"bytes": 11, "maxWriteBytes": 10}
    assert not (mounts.project / "artifacts" / "long.md").exists()


async def test_write_if_match(mounts: Mounts) -> None:
    ctx = make_ctx(mounts)
    sha = hashlib.sha256((mounts.project / "readme.md").read_bytes()).hexdigest()
    assert err(await call(ctx, "fs_write", {"path": "@project/readme.md", "content": "x", "ifMatchSha256": "ab" * 32}))[
        "code"
    ] == "E_PRECONDITION_FAILED"
    assert (mounts.project / "readme.md").read_text().startswith("Title")
    assert (await call(ctx, "fs_write", {"path": "@project/readme.md", "content": "x", "ifMatchSha256": sha})).result["ok"]


async def test_replace_edits_one_exact_match(mounts: Mounts) -> None:
    ctx = make_ctx(mounts)
    path = mounts.project / "docs" / "guide.md"
    before = path.read_bytes()
    out = await call(ctx, "fs_apply_patch", {"path": "@project/docs/guide.md", "patch": {"operation": "replace", "oldText": "setup\n", "newText": "install\n"}})
    assert out.result["ok"] and out.result["sha256Before"] == hashlib.sha256(before).hexdigest()
    assert path.read_text().startswith("intro\ninstall\nNeedle")
    assert out.files_written == ["@project/docs/guide.md"] and not out.state_changed


@pytest.mark.parametrize(("old", "count"), [("missing text", 0), ("NEEDLE AGAIN", 0), ("e", 9), ("\n", 6)])
async def test_replace_needs_a_unique_match(mounts: Mounts, old: str, count: int) -> None:
    path = mounts.project / "docs" / "guide.md"
    before = path.read_bytes()
    args = {"path": "@project/docs/guide.md", "operation": "replace", "oldText": old, "newText": "X"}
    error = err(await call(make_ctx(mounts), "fs_apply_patch", args))
    assert error["code"] == "E_PRECONDITION_FAILED" and error["details"]["matches"] == count
    assert f"({count} matches)" in error["message"]
    assert path.read_bytes() == before


async def test_patch_operations_are_bound_to_their_targets(mounts: Mounts) -> None:
    ctx = make_ctx(mounts)
    front = err(await call(ctx, "fs_apply_patch", {"path": "@project/readme.md", "patch": {"operation": "updateFrontmatter", "update": {}}}))
    assert front["code"] == "E_INVALID_ARGS" and "@state/workflow.md" in front["message"]
    repl = err(await call(ctx, "fs_apply_patch", {"path": "@state/workflow.md", "patch": {"operation": "replace", "oldText": "a", "newText": "b"}}))
    assert repl["code"] == "E_INVALID_ARGS" and "updateFrontmatter" in repl["message"]
    odd = err(await call(ctx, "fs_apply_patch", {"path": "@state/workflow.md", "patch": {"operation": "diff"}}))
    assert odd["code"] == "E_INVALID_ARGS" and "patch.operation" in odd["message"]


# --- ui_ask_user ---------------------------------------------------------------------------------------


async def test_ask_user_returns_the_widget(mounts: Mounts) -> None:
    args = {"widgetId": "workflow_state_change_confirm", "type": "confirmation", "message": "Proceed?"}
    outcome = await call(make_ctx(mounts, mode="chat"), "ui.ask_user", args)
    assert outcome.widget == args
    assert outcome.result["ok"] and outcome.result["widgetId"] == "workflow_state_change_confirm"
    block = outcome.result["widgetBlock"]
    assert block.startswith("```widget\n") and json.loads(block.removeprefix("```widget\n").removesuffix("\n```")) == args


async def test_ask_user_form_and_selection_are_accepted(mounts: Mounts) -> None:
    ctx = make_ctx(mounts)
    form = {
        "widgetId": "story",
        "type": "form",
        "message": "Which story?",
        "schema": {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]},
    }
    assert (await call(ctx, "ui_ask_user", form)).widget == form
    sel = {"widgetId": "pick", "type": "selection", "message": "Pick", "options": [{"value": 1, "label": "One"}]}
    assert (await call(ctx, "ui_ask_user", sel)).widget["options"] == [{"value": "1", "label": "One"}]


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"widgetId": "w", "type": "selection", "message": "m"}, "options"),
        ({"widgetId": "w", "type": "action_selection", "message": "m", "actions": []}, "actions"),
        ({"widgetId": "w", "type": "form", "message": "m", "schema": {"type": "object"}}, "properties"),
        ({"widgetId": "w", "type": "form", "message": "m", "schema": {"properties": {"a": {"type": "nope"}}}}, "JSON Schema"),
        ({"widgetId": "w", "type": "dropdown", "message": "m"}, "type"),
        ({"type": "confirmation", "message": "m"}, "widgetId"),
    ],
)
async def test_ask_user_rejects_bad_payloads(mounts: Mounts, payload: dict, needle: str) -> None:
    outcome = await call(make_ctx(mounts), "ui_ask_user", payload)
    error = err(outcome)
    assert error["code"] == "E_INVALID_ARGS" and needle in error["message"]
    assert outcome.widget is None


# --- arguments, availability, policy -------------------------------------------------------------------


async def test_malformed_json_arguments(mounts: Mounts) -> None:
    events: list[dict] = []
    ctx = make_ctx(mounts, events=events)
    error = err(await call(ctx, "fs_read", '{"path": "@project/readme.md",'))
    assert error["code"] == "TOOL_ARGS_INVALID_JSON" and "line 1" in error["message"]
    assert err(await call(ctx, "fs_read", '["@project/readme.md"]'))["code"] == "E_INVALID_ARGS"
    missing = err(await call(ctx, "fs_read", "{}"))
    assert missing["code"] == "E_INVALID_ARGS" and "path: Field required" in missing["message"]
    assert missing["details"]["errors"] == [{"path": "path", "message": "Field required"}]
    assert len(events) == 3 and events[0]["input"] == {"raw": '{"path": "@project/readme.md",'}


async def test_unknown_tool_names_the_available_ones(mounts: Mounts) -> None:
    error = err(await call(make_ctx(mounts, mode="agent"), "shell_exec", {"cmd": "ls"}))
    assert error["code"] == "TOOL_NOT_AVAILABLE"
    assert "fs_read, fs_list, fs_search, ui_ask_user" in error["message"]


@pytest.mark.parametrize("mode", ["agent", "chat", "script"])
async def test_writes_exist_only_in_runs(mounts: Mounts, mode: str) -> None:
    ctx = make_ctx(mounts, mode=mode)
    assert [s["function"]["name"] for s in ToolHost().specs(ctx)] == ["fs_read", "fs_list", "fs_search", "ui_ask_user"]
    for tool in ("fs_write", "fs.apply_patch", "workflow_rewind"):
        assert err(await call(ctx, tool, {"path": "@project/x.md", "content": "x"}))["code"] == "TOOL_NOT_AVAILABLE"
    assert not (mounts.project / "x.md").exists()


async def test_fs_disabled_leaves_only_ask_user(mounts: Mounts) -> None:
    ctx = make_ctx(mounts, policy=EffectivePolicy(fs_enabled=False))
    assert [s["function"]["name"] for s in ToolHost().specs(ctx)] == ["ui_ask_user"]
    assert err(await call(ctx, "fs_read", {"path": "@project/readme.md"}))["code"] == "TOOL_NOT_AVAILABLE"


def test_run_specs_are_valid_function_schemas(mounts: Mounts) -> None:
    specs = ToolHost().specs(make_ctx(mounts))
    assert [s["function"]["name"] for s in specs] == ALL_TOOLS
    for spec in specs:
        assert spec["type"] == "function" and spec["function"]["description"]
        Draft202012Validator.check_schema(spec["function"]["parameters"])
        assert "$ref" not in json.dumps(spec)


def test_name_mapping() -> None:
    assert [canonical_name(n) for n in ALL_TOOLS] == [
        "fs.read", "fs.list", "fs.search", "fs.write", "fs.apply_patch", "ui.ask_user", "workflow.rewind"
    ]
    assert [wire_name(canonical_name(n)) for n in ALL_TOOLS] == ALL_TOOLS


async def test_unexpected_failure_is_a_safe_internal_error(mounts: Mounts, tmp_path: Path) -> None:
    events: list[dict] = []
    broken = make_ctx(mounts, policy=EffectivePolicy(max_read_bytes=None), events=events)  # type: ignore[arg-type]
    error = err(await call(broken, "fs_read", {"path": "@project/readme.md"}))
    assert error["code"] == "E_INTERNAL"
    assert str(tmp_path) not in error["message"] and "Traceback" not in error["message"]
    assert len(events) == 1 and events[0]["input"] == {"path": "@project/readme.md"}


async def test_audit_event_shape(mounts: Mounts) -> None:
    events: list[dict] = []
    ctx = make_ctx(mounts, events=events)
    (mounts.project / "long.md").write_text("z" * 5000)
    await call(ctx, "fs.read", {"path": "@project/long.md"})
    await call(ctx, "fs_write", {"path": "@project/out.md", "content": "secret body"})
    read_event, write_event = events
    assert set(read_event) == {"ts", "kind", "toolCallId", "toolName", "agentId", "input", "output", "durationMs"}
    assert read_event["kind"] == "tool.exec" and read_event["toolName"] == "fs.read"
    assert read_event["toolCallId"] == "call-1" and read_event["agentId"] == "agent-1"
    assert len(read_event["output"]["content"]) <= 200 and read_event["output"]["ok"] is True
    assert write_event["input"]["content"] == {"bytes": 11, "sha256": hashlib.sha256(b"secret body").hexdigest()}
    assert "secret body" not in json.dumps(events)
    assert isinstance(read_event["durationMs"], float)


def test_effective_policy_only_tightens() -> None:
    agent = Agent.model_validate(
        {
            "id": "sm",
            "metadata": {"name": "Bob", "title": "SM", "icon": "x"},
            "persona": {"role": "r", "identity": "i", "communication_style": "c", "principles": "p"},
            "tools": {"fs": {"enabled": True, "maxReadBytes": 1000, "maxWriteBytes": 99_999_999}, "mcp": {"enabled": True}},
        }
    )
    merged = effective_policy(SystemToolPolicy(), agent)
    assert merged.fs_enabled and merged.max_read_bytes == 1000 and merged.max_write_bytes == 2_097_152
    assert merged.mcp_requested is False
    assert effective_policy(SystemToolPolicy(fs_enabled=False), agent).fs_enabled is False
    no_fs = agent.model_copy(update={"tools": agent.tools.model_copy(update={"fs": agent.tools.fs.model_copy(update={"enabled": False})})})  # type: ignore[union-attr]
    assert effective_policy(SystemToolPolicy(), no_fs).fs_enabled is False
    assert effective_policy(SystemToolPolicy(max_read_bytes=10), None).max_read_bytes == 10


# --- atomic helpers ------------------------------------------------------------------------------------


def test_atomic_helpers(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "file.txt"
    atomic_write_text(target, "one")
    target.chmod(0o640)
    atomic_write_text(target, "two")
    assert target.read_text() == "two" and stat.S_IMODE(target.stat().st_mode) == 0o640
    log = tmp_path / "logs" / "execution.jsonl"
    append_line(log, b'{"n":1}\n')
    append_line(log, b'{"n":2}\n')
    assert [json.loads(line) for line in log.read_text().splitlines()] == [{"n": 1}, {"n": 2}]
    assert sorted(os.listdir(tmp_path / "sub")) == ["file.txt"]


def test_resolve_is_importable_for_other_modules(mounts: Mounts) -> None:
    assert resolve(mounts, "@state/workflow.md", write=True).alias == "@state/workflow.md"


async def test_search_clips_very_long_lines(mounts: Mounts) -> None:
    (mounts.project / "min.js").write_text("x" * 100_000 + "needle" + "y" * 100 + "\n")
    out = (await call(make_ctx(mounts), "fs_search", {"path": "@project/min.js", "pattern": "needle"})).result
    (match,) = out["matches"]
    assert match["column"] == 100_001 and len(match["text"]) == 401 and match["text"].endswith("…")


async def test_patch_given_as_a_json_string_is_accepted(mounts: Mounts) -> None:
    patch = json.dumps({"operation": "replace", "oldText": "Title", "newText": "Heading"})
    out = await call(make_ctx(mounts), "fs_apply_patch", {"path": "@project/readme.md", "patch": patch})
    assert out.result["ok"] is True
    assert (mounts.project / "readme.md").read_text().startswith("Heading\n")
