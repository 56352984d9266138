"""Pytest fixtures for the fakes.

Import the ones you need into a test module or conftest.py:
`from tests.support.fakes.fixtures import fake_slack, scripted_llm  # noqa: F401`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from .llm_server import ScriptedLLM
from .slack_api import FakeSlack


@pytest_asyncio.fixture
async def scripted_llm() -> AsyncIterator[ScriptedLLM]:
    """A started ScriptedLLM, stopped after the test."""
    async with ScriptedLLM() as llm:
        yield llm


@pytest_asyncio.fixture
async def fake_slack() -> AsyncIterator[FakeSlack]:
    """A started FakeSlack (with its Socket Mode endpoint), stopped after the test."""
    async with FakeSlack() as slack:
        yield slack
