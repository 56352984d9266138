"""What a run may not touch, judged on the real path: git's data and the hidden paths, called as the
model calls the tools; commands and the file tools hide the same paths (one definition)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from crewagent.core.tools.off_limits import OffLimits
from crewagent.core.tools.shell.command_config import CommandsConfig
from crewagent.core.tools.shell.command_sandbox import sandbox_state
from tests.support.gitrepos import git
from tests.support.shell_sandbox import ShellBench, make_bench
from tests.support.tool_calls import big_tree

SECRET = "secret-config-text"


def refused(result: dict[str, Any], reason: str) -> None:
    assert result["ok"] is False and result["error"]["code"] == "E_SANDBOX_VIOLATION", result
    assert result["error"]["details"]["reason"] == reason, result


def git_repository(folder: Path) -> None:
    git(folder, "init", "--quiet", "--initial-branch=main")
    (folder / "readme.md").write_text("hello\n")
    git(folder, "add", "-A")
    git(folder, "commit", "--quiet", "-m", "first")


async def needs_sandbox() -> None:
    if not (await sandbox_state(CommandsConfig())).usable:
        pytest.skip("bubblewrap does not work on this machine")


async def test_a_link_to_a_worktrees_git_file_is_refused(tmp_path: Path, git_config: Path) -> None:
    bench = make_bench(tmp_path)
    main = tmp_path / "main"
    main.mkdir()
    git_repository(main)
    git(main, "worktree", "add", "--quiet", "-b", "run", str(bench.project))  # a run's worktree
    dot_git = (bench.project / ".git").read_text()
    (bench.project / "gitlink").symlink_to(".git")
    read = await bench.tool("fs_read", path="@project/gitlink")
    refused(read, "git metadata")
    assert str(tmp_path) not in json.dumps(read)  # the host's gitdir path never reaches the model
    refused(await bench.tool("fs_write", path="@project/gitlink", content="gitdir: /tmp/other\n"), "git metadata")
    patch = {"operation": "replace", "oldText": "gitdir", "newText": "gitdir: /tmp/other #"}
    refused(await bench.tool("fs_apply_patch", path="@project/gitlink", patch=patch), "git metadata")
    assert (bench.project / ".git").read_text() == dot_git


async def test_links_into_a_git_folder_are_refused(tmp_path: Path, git_config: Path) -> None:
    bench = make_bench(tmp_path)
    git_repository(bench.project)
    config = (bench.project / ".git" / "config").read_text()
    (bench.project / "gitlink").symlink_to(".git")
    (bench.project / "hooks").symlink_to(".git/hooks")  # a link to a folder inside .git
    refused(await bench.tool("fs_read", path="@project/gitlink/config"), "git metadata")
    write = await bench.tool("fs_write", path="@project/gitlink/config", content="[core]\n\tfsmonitor = ./x.sh\n")
    refused(write, "git metadata")
    refused(await bench.tool("fs_write", path="@project/hooks/pre-commit", content="#!/bin/sh\n"), "git metadata")
    refused(await bench.tool("fs_list", path="@project/hooks"), "git metadata")
    refused(await bench.tool("fs_search", pattern="core", path="@project/gitlink"), "git metadata")
    assert (bench.project / ".git" / "config").read_text() == config
    assert not (bench.project / ".git" / "hooks" / "pre-commit").exists()


async def test_a_packages_git_folder_is_refused(tmp_path: Path, git_config: Path) -> None:
    bench = make_bench(tmp_path)
    git_repository(bench.pkg)  # a package used from its own checkout: .git/config may hold a token
    git(bench.pkg, "remote", "add", "origin", "https://user:tok-123@git.example.invalid/pkg.git")
    refused(await bench.tool("fs_read", path="@pkg/.git/config"), "git metadata")
    read = await bench.tool("fs_read", path="@pkg/scripts/hello.py")
    assert read["ok"] and "hello from pkg" in read["content"]


async def test_git_data_a_command_made_is_refused_to_the_file_tools(tmp_path: Path) -> None:
    await needs_sandbox()
    bench = make_bench(tmp_path)
    made = await bench.run(
        "git init -q @project/nested && ln -s nested/.git @project/n && mkdir @project/sub && "
        "printf 'gitdir: /elsewhere\\n' > @project/sub/.git && ln -s .git @project/sub/g"
    )
    assert made["exitCode"] == 0, made
    refused(await bench.tool("fs_read", path="@project/n/config"), "git metadata")
    write = await bench.tool("fs_write", path="@project/n/config", content="[core]\n\tfsmonitor = ./hook.sh\n")
    refused(write, "git metadata")
    refused(await bench.tool("fs_read", path="@project/sub/g"), "git metadata")
    refused(await bench.tool("fs_write", path="@project/sub/g", content="gitdir: /tmp/other\n"), "git metadata")
    assert "fsmonitor" not in (bench.project / "nested" / ".git" / "config").read_text()
    assert (bench.project / "sub" / ".git").read_text() == "gitdir: /elsewhere\n"
    listed = await bench.tool("fs_list", path="@project/sub")
    assert listed["ok"] and listed["entries"] == [], listed


def hidden_bench(tmp_path: Path) -> tuple[ShellBench, Path, Path]:
    """A project holding the config file and a folder start-up hides (as the runtime home would be)."""
    bench = make_bench(tmp_path)
    config, home = bench.project / "crewagent.yml", bench.project / "home"
    config.write_text(f"# {SECRET}\n")
    home.mkdir()
    (home / "runs.json").write_text(f"{SECRET} in the home\n")
    (bench.project / "notes.md").write_text("ordinary notes\n")
    (bench.project / "cfg.txt").symlink_to("crewagent.yml")  # a link inside the project to a hidden file
    bench.off_limits = OffLimits.of((config, home))
    return bench, config, home


async def test_hidden_paths_are_refused_and_left_out_by_the_file_tools(tmp_path: Path) -> None:
    bench, config, home = hidden_bench(tmp_path)
    for path in ("@project/crewagent.yml", "@project/cfg.txt", "@project/home/runs.json"):
        refused(await bench.tool("fs_read", path=path), "hidden path")
        refused(await bench.tool("fs_write", path=path, content="commands: {default: allow}\n"), "hidden path")
    patch = {"operation": "replace", "oldText": SECRET, "newText": "x"}
    refused(await bench.tool("fs_apply_patch", path="@project/crewagent.yml", patch=patch), "hidden path")
    refused(await bench.tool("fs_list", path="@project/home"), "hidden path")
    refused(await bench.tool("fs_write", path="@project/home/new.md", content="x"), "hidden path")
    listed = await bench.tool("fs_list", path="@project")
    assert listed["entries"] == ["notes.md"], listed
    for search in ({"path": "@project"}, {"path": "@project", "globs": ["*.yml", "**/*.json"]}):
        found = await bench.tool("fs_search", pattern=SECRET, **search)
        assert found["ok"] and found["matches"] == [], found
    assert config.read_text() == f"# {SECRET}\n" and sorted(p.name for p in home.iterdir()) == ["runs.json"]


async def test_ripgrep_leaves_hidden_paths_out_too(tmp_path: Path) -> None:
    bench, _, _ = hidden_bench(tmp_path)
    big_tree(bench.project, 80)  # too big for the in-process walk: fs_search hands the tree to ripgrep
    (bench.project / "[odd].md").write_text(f"{SECRET}\n")
    bench.off_limits = OffLimits.of((*bench.off_limits.hidden, bench.project / "[odd].md"))
    found = await bench.tool("fs_search", pattern=SECRET, path="@project")
    assert found["ok"] and found["matches"] == [], found
    found = await bench.tool("fs_search", pattern="needle 1", path="@project")
    assert found["ok"] and found["matches"], found  # the rest of the tree is searched


async def test_the_sandbox_hides_exactly_what_the_file_tools_refuse(tmp_path: Path) -> None:
    await needs_sandbox()
    bench, _, _ = hidden_bench(tmp_path)
    hidden = bench.off_limits.within(bench.project)
    assert len(hidden) == 2
    for real in hidden:
        alias = "@project/" + real.relative_to(bench.project).as_posix()
        refused(await bench.tool("fs_read" if real.is_file() else "fs_list", path=alias), "hidden path")
        shown = await bench.run(f"cat {alias} 2>&1; ls -A {alias}; echo done")
        assert shown["exitCode"] == 0 and SECRET not in json.dumps(shown), shown
    rewrite = await bench.run("echo 'commands: {default: allow}' > @project/crewagent.yml")
    assert rewrite["exitCode"] != 0 and (bench.project / "crewagent.yml").read_text() == f"# {SECRET}\n"


async def test_links_inside_the_project_and_hidden_ancestors_still_work(tmp_path: Path) -> None:
    bench = make_bench(tmp_path)
    (bench.project / "docs").mkdir()
    (bench.project / "notes").symlink_to("docs")
    bench.off_limits = OffLimits.of((tmp_path,))  # the runtime home holding a run's checkout hides nothing of it
    wrote = await bench.tool("fs_write", path="@project/notes/a.md", content="through a link\n")
    assert wrote["ok"], wrote
    assert (bench.project / "docs" / "a.md").read_text() == "through a link\n"
    read = await bench.tool("fs_read", path="@project/notes/a.md")
    assert read["ok"] and read["content"] == "through a link\n"
