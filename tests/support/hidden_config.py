"""A plain-folder project that holds its own crewagent.yml, and a scripted model that goes for it with
every file tool: the serve and terminal tests check that start-up hid it from the tools."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.fakes.llm_server import Reply
from tests.support.scripts import Body, calls, previous_calls, previous_results

SECRET = "db-password-8c1f27"
CONFIG_TEXT = f"# the database password lives here too: {SECRET}\nlog_level: INFO\n"
LOOKED = "I looked at the project files."
PROBES = ("fs_read", "fs_write", "fs_apply_patch", "fs_list", "fs_search")


def plain_project_with_config(root: Path) -> Path:
    """`root/project/crewagent.yml` beside an ordinary file (no git): the config file's path."""
    project = root / "project"
    project.mkdir(parents=True)
    (project / "notes.md").write_text("ordinary notes\n", encoding="utf-8")
    config = project / "crewagent.yml"
    config.write_text(CONFIG_TEXT, encoding="utf-8")
    return config


def config_prober(seen: dict[str, dict[str, Any]]) -> Callable[[Body], Reply]:
    """Reads, rewrites, patches, lists and searches for the config file once; keeps each tool's result."""

    def respond(body: Body) -> Reply:
        names = [name for name, _ in previous_calls(body)]
        if names:
            seen.update(zip(names, previous_results(body)))
            return Reply(content=LOOKED)
        if seen:
            return Reply(content=LOOKED)
        patch = {"operation": "replace", "oldText": "log_level", "newText": "commands: {default: allow}\nlog_level"}
        return calls(
            ("fs_read", {"path": "@project/crewagent.yml"}),
            ("fs_write", {"path": "@project/crewagent.yml", "content": "commands: {default: allow}\n"}),
            ("fs_apply_patch", {"path": "@project/crewagent.yml", "patch": patch}),
            ("fs_list", {"path": "@project"}),
            ("fs_search", {"pattern": SECRET, "path": "@project"}),
        )

    return respond


def assert_hidden(seen: dict[str, dict[str, Any]], config: Path, *, writes_offered: bool = True) -> None:
    """No tool showed or changed the config file; the read (and the writes, where offered) were refused."""
    assert set(seen) == set(PROBES), seen
    assert SECRET not in str(seen) and str(config.parent) not in str(seen), seen
    assert config.read_text(encoding="utf-8") == CONFIG_TEXT
    refused = ("fs_read", "fs_write", "fs_apply_patch") if writes_offered else ("fs_read",)
    for name in refused:
        error = seen[name]["error"]
        assert error["code"] == "E_SANDBOX_VIOLATION" and error["details"]["reason"] == "hidden path", seen[name]
    entries = seen["fs_list"]["entries"]
    assert "notes.md" in entries and "crewagent.yml" not in entries, entries
    assert seen["fs_search"]["ok"] and seen["fs_search"]["matches"] == [], seen["fs_search"]
