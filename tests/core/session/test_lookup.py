"""What a name means before any session exists: the session service answers the Home tab and `/crew TEXT`
with the rules it opens a session by."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.session_harness import kinds, session_harness


async def test_startables_list_each_agent_with_the_triggers_of_what_it_can_start(project: Path) -> None:
    async with session_harness(project, "multi-workflows") as s:
        agents = {a.key: a for a in s.service.startables()}
        assert list(agents) == ["analyst", "architect", "pm", "summarizer"]
        assert agents["analyst"].name == "Mary" and agents["analyst"].triggers == ("hello-linear", "hello-branch")
        assert agents["architect"].triggers == ()  # a prompt action starts nothing
        assert (agents["pm"].package_id, agents["pm"].agent_id) == ("multi-workflows", "pm")


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("", True),  # opens the agent picker
        ("chat", True),
        ("Mary", True),
        ("architect", True),
        ("2", True),
        ("winston review the design", True),  # a name, then what to ask
        ("hello-branch", True),  # the one agent whose menu has it
        ("9", False),
        ("make me a sandwich", False),
    ],
)
async def test_names_something_tells_what_opening_a_session_would_do(project: Path, text: str, named: bool) -> None:
    async with session_harness(project, "multi-workflows") as s:
        assert s.service.names_something(text) is named


@pytest.mark.parametrize("text", ["Mary", "2", "chat", "9", "make me a sandwich"])
async def test_a_name_that_names_nothing_is_exactly_one_that_only_lists_the_agents(project: Path, text: str) -> None:
    async with session_harness(project, "multi-workflows") as s:
        named = s.service.names_something(text)
        opened = kinds(await s.open(text))
        assert ("show_agents" in opened and "show_menu" not in opened and s.session.mode == "idle") is not named, opened
