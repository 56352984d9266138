"""Shared test setup: every test gets a private runtime home and a clean environment."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest_plugins = ("tests.gitrepos",)  # git_config / team_repo: real repositories with a bare remote

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

_LEAKY_ENV = (
    "OPENAI_BASE_URL",
    "OPENAI_API_KEY",
    "CREWAGENT_MODEL",
    "SLACK_BOT_TOKEN",
    "SLACK_APP_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_API_URL",
)


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _LEAKY_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CREWAGENT_HOME", str(tmp_path / "crewagent-home"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A fresh copy of the sample project, so runs can write artifacts freely."""
    dest = tmp_path / "project"
    shutil.copytree(EXAMPLES / "sample-project", dest)
    return dest
