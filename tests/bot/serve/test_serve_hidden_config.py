"""serve with `--config` inside its plain-folder project: a run's file tools never show or change that
file, with or without `commands:` (start-up hands the config file's path to the engine)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.support.bot_harness import bot_harness
from tests.support.fakes import ScriptedLLM
from tests.support.hidden_config import assert_hidden, config_prober, plain_project_with_config
from tests.support.linear_package import make_linear_package


async def test_a_runs_file_tools_cannot_read_or_rewrite_the_config_file(tmp_path: Path) -> None:
    config = plain_project_with_config(tmp_path)
    package = make_linear_package(tmp_path / "pkg", nodes=2)
    seen: dict[str, dict[str, Any]] = {}
    llm = ScriptedLLM(responder=config_prober(seen))
    async with llm, bot_harness(config.parent, packages=[str(package)], llm=llm, config_file=config) as h:
        top = await h.mention("handbook")
        await h.wait_status(top, "Waiting for your reply")
    assert_hidden(seen, config)
