"""`crewagent serve`: validate config, build the bot, run until SIGINT/SIGTERM, shut down gracefully."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import signal
import sys
import tempfile
from pathlib import Path

from crewagent.bot.serve.app import CrewBot, build
from crewagent.bot.serve.heap import freeze_startup_heap
from crewagent.bot.serve.bound_packages import PackageLoadFailed
from crewagent.bot.connection import TokenRefused
from crewagent.bot.config import BotConfig, ConfigError, describe, load_config
from crewagent.bot.logging import resolve_format, setup_logging
from crewagent.core.api.errors import CrewError

from .exit_codes import EXIT_USAGE
from .paths import NO_SUCH

HOWTO = """\
CrewAgent needs Slack credentials to serve.

1. Create the Slack app from this repository's manifest.yml
   (https://api.slack.com/apps → Create New App → From an app manifest) and install it.
2. Set the tokens in the environment, then run `crewagent serve` again:
   Socket Mode (no public URL needed):
     SLACK_BOT_TOKEN=xoxb-...  (OAuth & Permissions → Bot User OAuth Token)
     SLACK_APP_TOKEN=xapp-...  (Basic Information → App-Level Tokens, scope connections:write)
   HTTP mode (Slack posts to https://<your-host>/slack/events, port set with --port):
     SLACK_BOT_TOKEN=xoxb-...
     SLACK_SIGNING_SECRET=...  (Basic Information → App Credentials)
   Also: CREWAGENT_MODEL (and OPENAI_API_KEY / OPENAI_BASE_URL for your model endpoint).

To try the agents without Slack, use `crewagent chat` in a terminal."""

NO_MODEL = """\
No model is configured. Set CREWAGENT_MODEL to the model name your endpoint serves
(plus OPENAI_BASE_URL for a non-OpenAI endpoint and OPENAI_API_KEY if it needs one),
or set `model:` in crewagent.yml."""

log = logging.getLogger("crewagent.serve")


def _print_package_problems(exc: PackageLoadFailed) -> None:
    print(f"The package {exc.path} is invalid; fix it (or check it with `crewagent validate`):", file=sys.stderr)
    for problem in exc.problems:
        where = f"{problem.file}: {problem.json_path}" if problem.json_path else problem.file
        print(f"  [{problem.level}] {where}: {problem.message}", file=sys.stderr)
        if problem.fix:
            print(f"      fix: {problem.fix}", file=sys.stderr)


def unwritable_projects(config: BotConfig) -> list[Path]:
    """Project folders this process cannot create files in (every artifact write would fail)."""
    bad = []
    for binding in config.bindings().values():
        if binding.project is None:
            continue  # a `repo:` binding: the bot clones it under its own home
        try:
            with tempfile.NamedTemporaryFile(dir=binding.project, prefix=".crewagent-write-check-"):
                pass
        except OSError:
            bad.append(binding.project)
    return sorted(set(bad))


def _unwritable_message(folders: list[Path]) -> str:
    uid, gid = os.getuid(), os.getgid()
    names = ", ".join(str(f) for f in folders)
    return (
        f"The project folder {names} is not writable by this process (uid {uid}, gid {gid}), so no workflow "
        "could save its artifacts. Fix it with one of:\n"
        f"  - give that user the folder: `sudo chown -R {uid}:{gid} /path/to/checkout` on the host;\n"
        "  - or run the container as the folder's owner: `docker run --user \"$(id -u):$(id -g)\" ...`\n"
        "    (docker-compose.yml: set CREW_UID and CREW_GID to those ids);\n"
        "  - or mount a checkout the user can write to."
    )


CLOSE_MARGIN = 1.5  # seconds past the turns' grace for everything else a shutdown releases


async def serve(config: BotConfig, port: int) -> int:
    """0 after a requested stop (SIGTERM/SIGINT, in any state), 2 for a refused token or bad set-up."""
    try:
        bot = build(config)
    except PackageLoadFailed as exc:
        _print_package_problems(exc)
        return EXIT_USAGE
    except CrewError as exc:
        print(exc.message, file=sys.stderr)
        return EXIT_USAGE

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        status = await _run_until_stopped(bot, config, port, stop)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await _close(bot, config.limits.shutdown_grace)
    return status


async def _run_until_stopped(bot: CrewBot, config: BotConfig, port: int, stop: asyncio.Event) -> int:
    """Reach Slack (retrying while it is unreachable), then serve until `stop`; a stop ends any step."""
    if config.slack.mode == "socket":
        # GET /healthz for container health checks
        starting = asyncio.ensure_future(bot.start_socket(health_host=config.host, health_port=port))
    else:
        starting = asyncio.ensure_future(bot.start_http(config.host, port))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
        if not starting.done():
            starting.cancel()
            await asyncio.gather(starting, return_exceptions=True)
    if stop.is_set():
        log.info("stopped before Slack was reached")
        return 0
    try:
        starting.result()
    except TokenRefused as exc:
        print(exc.message, file=sys.stderr)
        return EXIT_USAGE
    except (CrewError, OSError) as exc:
        print(f"crewagent could not start: {getattr(exc, 'message', None) or exc}", file=sys.stderr)
        return 1
    freeze_startup_heap()
    log.info("crewagent is up", extra=describe(config))
    await stop.wait()
    log.info("shutting down: finishing in-flight turns")
    return 0


async def _close(bot: CrewBot, grace: float) -> None:
    """Stop taking events and release everything; a shutdown never takes much longer than `grace`."""
    try:
        async with asyncio.timeout(grace + CLOSE_MARGIN):
            await bot.close(grace)
    except TimeoutError:
        log.warning("shutdown took longer than %.1f s; exiting anyway", grace + CLOSE_MARGIN)


def raise_open_file_limit() -> None:
    """Every pumping run holds a model connection and its two log files open; allow what the system allows.

    The common default soft limit (1024) is reached near 300 runs at once.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 65536
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError):
            log.warning("could not raise the open-file limit", extra={"soft": soft, "hard": hard})


PROJECT_ENV = "CREWAGENT_PROJECT"  # the project when --project is not given (the Docker image sets it)
CONFIG_ENV = "CREWAGENT_CONFIG"  # the crewagent.yml when --config is not given


def run(args: argparse.Namespace) -> int:
    project = args.project or os.environ.get(PROJECT_ENV, "").strip() or None
    config_path = args.config or os.environ.get(CONFIG_ENV, "").strip() or None
    typed = [("--config" if args.config else CONFIG_ENV, config_path),
             ("--project" if args.project else PROJECT_ENV, project),
             *(("--package", package) for package in args.package or ())]
    for option, value in typed:
        if value is not None and not Path(value).expanduser().exists():
            print(f"error: {option} {value}: {NO_SUCH}", file=sys.stderr)
            return EXIT_USAGE
    try:
        config = load_config(config_path=config_path, project=project, packages=args.package or (), host=args.host)
    except ConfigError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_USAGE
    try:
        log_format = resolve_format(getattr(args, "log_format", None))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    setup_logging(config.log_level, log_format=log_format)
    if config.slack.mode is None:
        print(HOWTO, file=sys.stderr)
        return EXIT_USAGE
    if not config.model:
        print(NO_MODEL, file=sys.stderr)
        return EXIT_USAGE
    unwritable = unwritable_projects(config)
    if unwritable:
        print(_unwritable_message(unwritable), file=sys.stderr)
        return EXIT_USAGE
    raise_open_file_limit()
    return asyncio.run(serve(config, args.port))
