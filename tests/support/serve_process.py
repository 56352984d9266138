"""`crewagent serve` in HTTP mode as a real process (for kill -9 tests), its stderr kept as it comes."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tests.support.fakes import BOT_TOKEN
from tests.support.processes import Spawner, free_port

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SECRET = "test-signing-secret"


async def start_serve(
    spawn: Spawner, project: Path, home: Path, api_url: str, model_url: str, *, packages: tuple[str, ...] = ("multi-workflows",),
    database_url: str | None = None, port: int | None = None, config: Path | None = None,
) -> tuple[asyncio.subprocess.Process, int]:
    """Start serve; returns (process, port). Its stderr goes to `home/serve.log` (appended)."""
    port = port or free_port()
    env = {
        **os.environ,
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_API_URL": api_url,
        "SLACK_SIGNING_SECRET": SECRET,
        "CREWAGENT_MODEL": "scripted",
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "test",
        "CREWAGENT_HOME": str(home),
    }
    env.pop("SLACK_APP_TOKEN", None)
    if database_url is not None:
        env["CREWAGENT_DATABASE_URL"] = database_url
    argv = [sys.executable, "-m", "crewagent.cli", "serve", "--project", str(project), "--port", str(port), "--host", "127.0.0.1"]
    for package in packages:
        argv += ["--package", str(EXAMPLES / package)]
    if config is not None:
        argv += ["--config", str(config)]
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "serve.log", "ab") as log:
        process = await spawn(*argv, cwd=REPO, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=log)
    return process, port
