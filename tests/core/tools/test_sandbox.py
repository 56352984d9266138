"""Sandbox: alias paths resolve inside their mount or are rejected, leaving every file untouched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from crewagent.core.tools.mounts import SandboxViolation, normalise, resolve
from crewagent.core.package.models import Graph
from crewagent.core.document.state import STATE_FILE, init_state_text
from crewagent.core.tools.base import EffectivePolicy, Mounts, ToolContext
from crewagent.core.tools.registry import ToolHost

GRAPH = Graph.model_validate(
    {
        "schemaVersion": "1.1",
        "entryNodeId": "s1",
        "nodes": [
            {"id": "s1", "type": "step", "file": "steps/s1.md"},
            {"id": "end", "type": "end", "file": "steps/end.md"},
        ],
        "edges": [{"from": "s1", "to": "end", "label": "next"}],
    }
)
TEMPLATE = '---\nschemaVersion: "1.1"\nworkflowType: "t"\ncurrentNodeId: ""\nstepsCompleted: []\n---\n# State\n'


@pytest.fixture
def roots(tmp_path: Path) -> Mounts:
    project, pkg, state, outside = (tmp_path / n for n in ("project", "pkg", "state", "outside"))
    for d in (project / "artifacts", pkg / "steps", state / "logs", outside):
        d.mkdir(parents=True)
    (project / "notes.md").write_text("project notes\n")
    (pkg / "steps" / "s1.md").write_text("# step\n")
    (outside / "secret.txt").write_text("TOP SECRET\n")
    (state / STATE_FILE).write_text(
        init_state_text(TEMPLATE, GRAPH, run_id="r", agent_id="a", workflow_id="w", now="2025-01-01T00:00:00Z")
    )
    return Mounts(project=project, pkg=pkg, state=state)


def run_ctx(mounts: Mounts, events: list | None = None, mode: str = "run") -> ToolContext:
    return ToolContext(
        mounts=mounts,
        policy=EffectivePolicy(),
        mode=mode,  # type: ignore[arg-type]
        agent_id="a",
        run_id="r" if mounts.state else None,
        graph=GRAPH,
        audit=events.append if events is not None else None,
    )


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}


# --- normalisation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("@project/a/b.md", ("@project", "a/b.md")),
        ("./@project/./a//b.md", ("@project", "a/b.md")),
        ("@project\\docs\\x.md", ("@project", "docs/x.md")),
        ("@project", ("@project", "")),
        ("@project/", ("@project", "")),
        ("artifacts/story.md", ("@project", "artifacts/story.md")),
        ("{project-root}/README.md", ("@project", "README.md")),
        ("{package-root}/steps/s1.md", ("@pkg", "steps/s1.md")),
    ],
)
def test_normalise_accepts_alias_forms(given: str, expected: tuple[str, str]) -> None:
    assert normalise(given) == expected


@pytest.mark.parametrize(
    ("given", "reason"),
    [
        ("@project/../outside/secret.txt", "parent traversal"),
        ("@project/a/../../x", "parent traversal"),
        ("@project\\..\\x", "parent traversal"),
        ("../etc/passwd", "parent traversal"),
        ("/etc/passwd", "absolute path"),
        ("C:\\Windows\\system.ini", "absolute path"),
        ("c:/x", "absolute path"),
        ("@project/a\x00b", "NUL byte"),
        ("@foo/x.md", "unknown mount"),
        ("notes.md", "missing mount"),
        ("", "empty path"),
    ],
)
def test_normalise_rejects_escapes(given: str, reason: str) -> None:
    with pytest.raises(SandboxViolation) as info:
        normalise(given)
    assert info.value.code == "E_SANDBOX_VIOLATION"
    assert info.value.details["reason"] == reason


def test_unknown_mount_message_lists_the_mounts() -> None:
    with pytest.raises(SandboxViolation) as info:
        normalise("@home/x")
    assert "@project/" in info.value.message and "@pkg/" in info.value.message


# --- resolution against real folders ----------------------------------------------------------------


def test_resolve_maps_inside_the_mount(roots: Mounts) -> None:
    got = resolve(roots, "@project/artifacts/new/file.md", write=True)
    assert got.alias == "@project/artifacts/new/file.md"
    assert got.mount == "@project" and got.rel == "artifacts/new/file.md"
    assert got.real == Path(os.path.realpath(roots.project)) / "artifacts" / "new" / "file.md"
    assert got.project_relative == "artifacts/new/file.md"


def test_write_to_pkg_is_rejected(roots: Mounts) -> None:
    assert resolve(roots, "@pkg/steps/s1.md", write=False).rel == "steps/s1.md"
    with pytest.raises(SandboxViolation) as info:
        resolve(roots, "@pkg/steps/s1.md", write=True)
    assert info.value.details["reason"] == "write to read-only mount"


def test_state_outside_a_run_is_rejected(roots: Mounts) -> None:
    no_run = Mounts(project=roots.project, pkg=roots.pkg, state=None)
    with pytest.raises(SandboxViolation) as info:
        resolve(no_run, "@state/workflow.md", write=False)
    assert "no run state here" in info.value.message


def test_symlinks_pointing_out_are_rejected(roots: Mounts, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    (roots.project / "leak.txt").symlink_to(outside / "secret.txt")
    (roots.project / "leakdir").symlink_to(outside, target_is_directory=True)
    (roots.project / "dangling").symlink_to(outside / "not-yet.txt")
    for alias in ("@project/leak.txt", "@project/leakdir/secret.txt", "@project/leakdir/new.md", "@project/dangling"):
        with pytest.raises(SandboxViolation) as info:
            resolve(roots, alias, write=True)
        assert info.value.details["reason"] == "symlink escape"
        assert str(tmp_path) not in info.value.message


def test_symlink_staying_inside_is_allowed(roots: Mounts) -> None:
    (roots.project / "alias.md").symlink_to(roots.project / "notes.md")
    got = resolve(roots, "@project/alias.md", write=False)
    assert got.real.name == "notes.md"


def test_resolution_agrees_with_realpath_on_every_path_through_symlinks(roots: Mounts, tmp_path: Path) -> None:
    """resolve() only looks below the mount root; whatever it decides must be what realpath says."""
    project, outside = roots.project, tmp_path / "outside"
    (project / "a" / "b").mkdir(parents=True)
    (project / "a" / "f.md").write_text("x")
    (project / "in").symlink_to(project / "a", target_is_directory=True)
    (project / "a" / "rel").symlink_to("b", target_is_directory=True)
    (project / "a" / "up").symlink_to("..", target_is_directory=True)
    (project / "a" / "loop").symlink_to(project / "a" / "loop")
    (project / "out").symlink_to(outside, target_is_directory=True)
    (project / "gone").symlink_to(outside / "missing.md")
    names = ["a", "b", "f.md", "in", "rel", "up", "loop", "out", "gone", "new"]
    root = os.path.realpath(project)
    paths = [[x] for x in names] + [[x, y] for x in names for y in names]
    paths += [[x, y, z] for x in ("a", "in", "out") for y in names for z in ("b", "f.md", "rel", "new")]
    for parts in paths:
        expected = os.path.realpath(os.path.join(root, *parts))
        inside = expected == root or expected.startswith(root + os.sep)
        alias = "@project/" + "/".join(parts)
        if inside:
            assert str(resolve(roots, alias, write=True).real) == expected, alias
        else:
            with pytest.raises(SandboxViolation):
                resolve(roots, alias, write=True)


# --- through the tools: rejected, audited, nothing touched -----------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("fs_write", {"path": "@project/../outside/secret.txt", "content": "pwned"}),
        ("fs_write", {"path": "/etc/hosts-copy", "content": "pwned"}),
        ("fs_write", {"path": "@project/x\u0000.md", "content": "pwned"}),
        ("fs_write", {"path": "@pkg/steps/s1.md", "content": "pwned"}),
        ("fs_write", {"path": "@cache/x.md", "content": "pwned"}),
        ("fs_write", {"path": "@project/leakdir/secret.txt", "content": "pwned"}),
        ("fs_write", {"path": "@project/leakdir/created.txt", "content": "pwned"}),
        ("fs_write", {"path": "@state/logs/execution.jsonl", "content": "pwned"}),
        ("fs_apply_patch", {"path": "@pkg/steps/s1.md", "patch": {"operation": "replace", "oldText": "#", "newText": "!"}}),
        ("fs_apply_patch", {"path": "@project/leak.txt", "patch": {"operation": "replace", "oldText": "TOP", "newText": "X"}}),
        ("fs_read", {"path": "@project/leak.txt"}),
        ("fs_read", {"path": "@project/../outside/secret.txt"}),
        ("fs_list", {"path": "@project/leakdir"}),
        ("fs_search", {"path": "@project/leakdir", "pattern": "SECRET"}),
    ],
)
async def test_tool_escapes_are_rejected_and_change_nothing(
    roots: Mounts, tmp_path: Path, tool: str, args: dict
) -> None:
    outside = tmp_path / "outside"
    (roots.project / "leak.txt").symlink_to(outside / "secret.txt")
    (roots.project / "leakdir").symlink_to(outside, target_is_directory=True)
    before = snapshot(tmp_path)
    events: list[dict] = []

    outcome = await ToolHost().execute(tool, json.dumps(args), run_ctx(roots, events), call_id="c1")

    assert outcome.result["ok"] is False
    assert outcome.result["error"]["code"] == "E_SANDBOX_VIOLATION"
    text = json.dumps(outcome.result)
    assert str(tmp_path) not in text and "TOP SECRET" not in text
    assert snapshot(tmp_path) == before
    assert not (outside / "created.txt").exists()
    assert len(events) == 1
    details = events[0]["output"]["error"]["details"]
    assert details["reason"] and "mount" in details and "path" in details


async def test_state_mount_outside_a_run_is_refused_by_tools(roots: Mounts) -> None:
    no_run = Mounts(project=roots.project, pkg=roots.pkg, state=None)
    outcome = await ToolHost().execute("fs_read", '{"path": "@state/workflow.md"}', run_ctx(no_run, mode="agent"))
    assert outcome.result["error"]["code"] == "E_SANDBOX_VIOLATION"
    assert "no run state here" in outcome.result["error"]["message"]


async def test_mountless_artifacts_path_maps_to_project(roots: Mounts) -> None:
    outcome = await ToolHost().execute(
        "fs_write", '{"path": "artifacts/plain.md", "content": "ok"}', run_ctx(roots)
    )
    assert outcome.result["ok"] is True
    assert outcome.result["path"] == "@project/artifacts/plain.md"
    assert (roots.project / "artifacts" / "plain.md").read_text() == "ok"


async def test_search_does_not_follow_symlinks_out(roots: Mounts, tmp_path: Path) -> None:
    (roots.project / "leak.txt").symlink_to(tmp_path / "outside" / "secret.txt")
    (roots.project / "leakdir").symlink_to(tmp_path / "outside", target_is_directory=True)
    outcome = await ToolHost().execute("fs_search", '{"path": "@project", "pattern": "SECRET"}', run_ctx(roots))
    assert outcome.result["ok"] is True and outcome.result["matches"] == []
