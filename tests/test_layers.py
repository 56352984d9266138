"""How the installed code is named and layered: one top-level name, and imports that go one way.

Everything installs under `crewagent` (`crewagent.core`, `crewagent.bot`, `crewagent.cli`), so nothing
named plain `core`, `bot` or `cli` lands in a shared environment. The engine never imports the Slack
surface, the terminal or Slack's SDKs, and the surfaces reach the engine only through its front door,
`crewagent.core.api`.
"""

from __future__ import annotations

import ast
import importlib.metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SURFACES = ("bot", "cli")
NEVER_IN_CORE = ("crewagent.bot", "crewagent.cli", "slack_bolt", "slack_sdk")


def _imports(tree: str) -> list[tuple[str, str]]:
    """(module file, absolute name imported) for every import under one source folder."""
    found = []
    for path in sorted((REPO / tree).rglob("*.py")):
        package = ["crewagent", *path.relative_to(REPO).with_suffix("").parts][:-1]  # the module's package
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [(str(path.relative_to(REPO)), alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package[: len(package) - node.level + 1] if node.level else []
                name = ".".join([*base, node.module] if node.module else base)
                found.append((str(path.relative_to(REPO)), name))
    return found


def test_the_install_puts_one_top_level_name_in_site_packages() -> None:
    distribution = importlib.metadata.distribution("crewagent-slack")
    top_level = (distribution.read_text("top_level.txt") or "").split()
    assert top_level == ["crewagent"], "install the checkout (pip install -e .) after changing setup.py"
    assert [e.value for e in distribution.entry_points if e.name == "crewagent"] == ["crewagent.cli.main:main"]


def test_the_engine_imports_neither_a_surface_nor_slack() -> None:
    wrong = [(f, name) for f, name in _imports("core") if name.startswith(NEVER_IN_CORE)]
    assert wrong == []


@pytest.mark.parametrize("surface", SURFACES)
def test_a_surface_reaches_the_engine_only_through_its_front_door(surface: str) -> None:
    wrong = [(f, name) for f, name in _imports(surface)
             if name.startswith("crewagent.core") and not name.startswith("crewagent.core.api")]
    assert wrong == []


def test_nothing_imports_the_folders_by_their_bare_names() -> None:
    bare = [(f, name) for tree in ("core", *SURFACES) for f, name in _imports(tree)
            if name.split(".")[0] in ("core", *SURFACES)]
    assert bare == []


# Where the bot may call Slack's Web API itself: the port every send goes through, the outbox courier
# that sends what the port recorded (and its looks into a thread for what may be there already), the paced
# client's own call, and Socket Mode's connection at start-up.
SLACK_CALLERS = (
    "bot/slack_port.py", "bot/outbox/courier.py", "bot/outbox/thread_lookup.py", "bot/slack_client.py",
    "bot/connection.py",
)
WEB_API_PREFIXES = (
    "chat_", "views_", "assistant_", "agents_", "reactions_", "files_", "users_", "conversations_", "apps_",
    "auth_", "team_", "pins_", "bookmarks_", "canvases_", "dnd_", "usergroups_", "reminders_", "search_",
)
SLACK_SENDERS = ("AsyncSetStatus", "AsyncSetTitle", "AsyncSetSuggestedPrompts", "AsyncSay", "AsyncRespond")


def _slack_calls(path: Path) -> list[str]:
    """Web API calls (`x.chat_postMessage(...)`, `x.api_call(...)`) and Bolt's senders used in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            name = node.func.attr
            if name.startswith(WEB_API_PREFIXES) or name == "api_call":
                found.append(f"{name}()")
        elif isinstance(node, ast.ImportFrom):
            found += [alias.name for alias in node.names if alias.name in SLACK_SENDERS]
    return found


def test_only_the_port_and_the_outbox_call_slack() -> None:
    """One way out: everything else hands the port a typed message (bot.outgoing), so the fence, the outbox,
    the edit budget and failing soft hold for every send."""
    calls = {
        str(path.relative_to(REPO)): found
        for path in sorted((REPO / "bot").rglob("*.py"))
        if str(path.relative_to(REPO)) not in SLACK_CALLERS and (found := _slack_calls(path))
    }
    assert calls == {}
    assert _slack_calls(REPO / "bot" / "slack_port.py")  # the guard sees the calls where they are allowed
