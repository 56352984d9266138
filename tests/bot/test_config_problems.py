"""A misspelt crewagent.yml key is named as unknown, with the nearest key the settings take at that place."""

from __future__ import annotations

from pathlib import Path

import pytest

from crewagent.bot.config import ConfigError, read_file_config


@pytest.mark.parametrize(("text", "line"), [
    ("modle: x\n", "modle: unknown key; did you mean `model`?"),
    ("limits: {max_concurent_runs: 3}\n", "limits.max_concurent_runs: unknown key; did you mean `max_concurrent_runs`?"),
    ("channels: {C1: {projet: .}}\n", "channels.C1.projet: unknown key; did you mean `project`?"),
    ("budgets: {daily_tokens_per_usr: 5}\n", "budgets.daily_tokens_per_usr: unknown key; did you mean `daily_tokens_per_user`?"),
    ("access: {zzz: 1}\n", "access.zzz: unknown key (the keys here: allowed_channels, allowed_users, admins)"),
])
def test_an_unknown_key_is_named_with_the_near_one(text: str, line: str, tmp_path: Path) -> None:
    path = tmp_path / "crewagent.yml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as error:
        read_file_config(path)
    assert error.value.problems == [f"{path}: {line}"]
