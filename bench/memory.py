"""Idle memory of `crewagent serve` against a bare Bolt app, both as real processes on loopback.

Starts `crewagent serve` (HTTP mode, the bundled packages and sample project) against FakeSlack and
the scripted model, waits until /healthz answers, lets it settle and reads its VmRSS from
/proc/<pid>/status; then does the same for a bare slack-bolt AsyncApp served by aiohttp (Bolt's own
adapter, one `app_mention` listener). Then one run of hello-branch goes through the bot and its RSS
is read again: what the first model call and tool use add (the openai SDK, RE2, ...).

    python bench/memory.py [--database URL|auto] [--settle 2]

Target: idle `serve` RSS at most 1.5x the bare Bolt app's.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import aiohttp  # noqa: E402

from tests.support.fakes.llm_server import ScriptedLLM  # noqa: E402
from tests.support.fakes.slack_api import BOT_TOKEN, FakeSlack  # noqa: E402
from tests.support.fakes.slack_events import app_mention_event, deliver_event, new_ts  # noqa: E402
from tests.support.processes import free_port, kill_group, wait_healthy  # noqa: E402
from tests.support.scripts import hello_branch_responder  # noqa: E402

SECRET = "bench-signing-secret"
EXAMPLES = REPO / "examples"
TARGET_RATIO = 1.5

BARE_BOLT = """
import sys
from aiohttp import web
from slack_bolt.async_app import AsyncApp
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_sdk.web.async_client import AsyncWebClient

api_url, port = sys.argv[1], int(sys.argv[2])
app = AsyncApp(client=AsyncWebClient(token="xoxb-bench", base_url=api_url), signing_secret="s")

@app.event("app_mention")
async def mention(event, say):
    await say("hi")

async def events(request):
    return to_aiohttp_response(await app.async_dispatch(await to_bolt_request(request)))

async def health(request):
    return web.json_response({"ok": True})

web_app = web.Application()
web_app.router.add_post("/slack/events", events)
web_app.router.add_get("/healthz", health)
web.run_app(web_app, host="127.0.0.1", port=port, print=None)
"""


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def measure(argv: list[str], env: dict[str, str], port: int, settle: float) -> tuple[int, float]:
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=REPO, env=env, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    async with aiohttp.ClientSession() as http:
        try:
            await wait_healthy(http, f"http://127.0.0.1:{port}/healthz", timeout=60)
        except AssertionError:
            kill_group(proc.pid)
            err = await proc.stderr.read() if proc.stderr else b""
            raise SystemExit(f"{argv[:4]} did not start: {err.decode(errors='replace')[-2000:]}") from None
    await asyncio.sleep(settle)  # start-up work (package loading, first scans) is over
    return proc.pid, rss_mib(proc.pid)


async def main(database: str | None, settle: float) -> int:
    work = Path(tempfile.mkdtemp(prefix="crewagent-memory-"))
    pids: list[int] = []
    try:
        async with FakeSlack() as slack, ScriptedLLM(responder=hello_branch_responder(preset_branch="greenfield")) as llm:
            bare_port = free_port()
            env = {**os.environ, "PYTHONPATH": str(REPO)}
            pid, bare = await measure([sys.executable, "-c", BARE_BOLT, slack.api_url, str(bare_port)], env, bare_port,
                                      settle)
            pids.append(pid)

            project = work / "project"
            shutil.copytree(EXAMPLES / "sample-project", project)
            port = free_port()
            env = {
                **os.environ,
                "SLACK_BOT_TOKEN": BOT_TOKEN,
                "SLACK_API_URL": slack.api_url,
                "SLACK_SIGNING_SECRET": SECRET,
                "CREWAGENT_MODEL": "scripted",
                "OPENAI_BASE_URL": llm.base_url,
                "OPENAI_API_KEY": "bench",
                "CREWAGENT_HOME": str(work / "home"),
            }
            if database:
                env["CREWAGENT_DATABASE_URL"] = database
            argv = [sys.executable, "-m", "crewagent.cli", "serve", "--project", str(project), "--port", str(port),
                    "--package", str(EXAMPLES / "hello-branch"), "--package", str(EXAMPLES / "create-story-micro")]
            pid, idle = await measure(argv, env, port, settle)
            pids.append(pid)

            async with aiohttp.ClientSession() as http:
                ts = new_ts()
                slack.add_message("C1", "<@UBOT> hello-branch", user="U1", ts=ts)
                status, _ = await deliver_event(
                    http, f"http://127.0.0.1:{port}/slack/events", SECRET, app_mention_event("<@UBOT> hello-branch", ts=ts)
                )
                assert status == 200
                await slack.wait_for("chat.postMessage", lambda p: "completed." in str(p), timeout=120)
            await asyncio.sleep(settle)
            after_run = rss_mib(pid)
    finally:
        for pid in pids:
            kill_group(pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)

    ratio = idle / bare
    store = "Postgres" if database else "embedded store"
    print(f"bare Bolt app (aiohttp adapter, one listener): {bare:6.1f} MiB RSS")
    print(f"crewagent serve, idle ({store}, 2 packages):   {idle:6.1f} MiB RSS = {ratio:.2f}x  "
          f"target <= {TARGET_RATIO}x {'ok' if ratio <= TARGET_RATIO else 'MISSED'}")
    print(f"crewagent serve after one hello-branch run:    {after_run:6.1f} MiB RSS (model SDK and tools loaded)")
    return 0


async def with_database(option: str | None, settle: float) -> int:
    if option != "auto":
        return await main(option, settle)
    from tests.support.postgres import PostgresServer, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("--database auto needs PostgreSQL's server binaries (apt-get install postgresql)")
    server = PostgresServer.start(bindir)
    try:
        return await main(server.url(server.create_database()), settle)
    finally:
        server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", metavar="URL|auto", help="run serve over Postgres (auto: a throwaway server)")
    parser.add_argument("--settle", type=float, default=2.0, help="seconds to wait after start before reading RSS")
    args = parser.parse_args()
    sys.exit(asyncio.run(with_database(args.database, args.settle)))
