"""Assembly: config → engine, session services, the Bolt app, and the Socket Mode / HTTP front doors.

`build(config)` wires everything without touching the network; `start_socket()` or
`start_http()` starts the work loop (see worker.py), opens the thread store, resumes runs a
previous process left running and starts taking events; `close()` stops taking events, gives
in-flight turns a grace period to reach a stop point (anything still running stays `running`
on disk and is resumed on the next start), then releases everything.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_sdk.web.async_client import AsyncWebClient

from core.checkout.binding import Checkout
from core.engine import Engine, EngineSettings
from core.llm import LLMClient, LLMSettings
from core.errors import CrewError
from core.package.loader import load_package
from core.package.validate import PackageInvalid
from core.package.models import Graph, Package
from core.runs_model import RunSnapshot
from core.runs import RunManager
from core.session.service import SessionService
from core.store import RuntimeStore
from core.tools.registry import ToolHost

from .access import AccessPolicy
from .bolt_app import CrewBoltApp
from .config import BotConfig
from .dedupe import Deduper
from .dispatch import BindingRuntime, Dispatcher
from .handlers import Handlers
from .lanes import ThreadLanes
from .fallbacks import Fallbacks
from .slack_io import SlackIO
from .status import StatusBoard
from .status_line import StatusLines
from .surface import AgentSurface
from .threads import ThreadKey, ThreadRecord, ThreadStore
from .worker import WorkLoop

log = logging.getLogger(__name__)

EVENTS_PATH = "/slack/events"


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def events_app(events: Handler, health: Handler) -> web.Application:
    app = web.Application()
    app.router.add_post(EVENTS_PATH, events)
    app.router.add_get("/healthz", health)
    return app


async def serve_web(app: web.Application, site: Callable[[web.AppRunner], web.BaseSite]) -> web.AppRunner:
    """Start serving `app` on the site `site(runner)` (TCP or Unix socket); the runner stops it later."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    await site(runner).start()
    return runner


class CrewBot:
    """The running bot: Bolt and the front door on the caller's loop, session work on the work loop."""

    def __init__(
        self,
        *,
        config: BotConfig,
        bolt_app: CrewBoltApp,
        client: AsyncWebClient,
        work_client: AsyncWebClient,
        work: WorkLoop,
        store: ThreadStore,
        lanes: ThreadLanes,
        board: StatusBoard,
        dispatcher: Dispatcher,
        engine: Engine,
        llm: LLMClient,
    ) -> None:
        self.config = config
        self.bolt_app = bolt_app
        self.client = client  # Bolt's, on the front-door loop (auth.test, Socket Mode)
        self.work_client = work_client  # SlackIO's, on the work loop
        self.work = work
        self.store = store
        self.lanes = lanes
        self.board = board
        self.dispatcher = dispatcher
        self.engine = engine
        self.llm = llm
        self.resumed = 0  # runs resumed at start-up
        self._prepared = False
        self._runner: web.AppRunner | None = None
        self._socket: AsyncSocketModeHandler | None = None

    # ---- lifecycle ------------------------------------------------------------------

    async def prepare(self) -> None:
        """Start the work loop, open the thread store, pick up runs a previous process left running."""
        if self._prepared:
            return
        self.work.start()
        self.resumed = await self.work.run(self._prepare_work())
        self._prepared = True
        if self.resumed:
            log.info("resuming interrupted runs", extra={"count": self.resumed})

    async def _prepare_work(self) -> int:
        # One pooled HTTP session (bound to the work loop) for every Web API call the work makes.
        self.work_client.session = aiohttp.ClientSession()
        await self.store.open()
        await self.dispatcher.open_checkouts()
        return await self.dispatcher.resume_interrupted()

    async def idle(self, timeout: float | None = None) -> bool:
        """True once no thread work is queued or running (within `timeout` seconds)."""
        if not self.work.running:
            return True
        return await self.work.run(self._idle(timeout))

    async def _idle(self, timeout: float | None) -> bool:
        lines = self.dispatcher.surface.lines if self.dispatcher.surface is not None else None
        return (
            await self.lanes.idle(timeout)
            and await self.board.idle(timeout)
            and (lines is None or await lines.idle(timeout))
        )

    def web_app(self) -> web.Application:
        """POST /slack/events (Bolt verifies the signature and the 5-minute timestamp window), GET /healthz."""
        return events_app(self._handle_http, self._health)

    async def _handle_http(self, request: web.Request) -> web.Response:
        bolt_response = await self.bolt_app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True, "busy_threads": len(self.lanes)})

    async def start_http(self, host: str = "0.0.0.0", port: int = 3000) -> int:
        """Serve HTTP mode; returns the bound port (pass port=0 for an ephemeral one)."""
        await self.prepare()
        self._runner = runner = await serve_web(self.web_app(), lambda r: web.TCPSite(r, host, port))
        bound = int(runner.addresses[0][1])
        log.info("listening for Slack events", extra={"mode": "http", "port": bound, "path": EVENTS_PATH})
        return bound

    async def start_unix(self, path: str) -> None:
        """Serve HTTP mode on a Unix socket: a worker process behind the sharding front door (front.py)."""
        await self.prepare()
        self._runner = await serve_web(self.web_app(), lambda r: web.UnixSite(r, path))

    async def start_socket(self) -> None:
        """Connect to Slack over Socket Mode (apps.connections.open goes to SLACK_API_URL too)."""
        await self.prepare()
        app_token = self.config.slack.app_token
        if app_token is None:
            raise RuntimeError("Socket Mode needs SLACK_APP_TOKEN")
        self._socket = AsyncSocketModeHandler(self.bolt_app, app_token.get_secret_value(), web_client=self.client)
        await self._socket.connect_async()
        log.info("connected to Slack", extra={"mode": "socket"})

    async def close(self, grace: float | None = None) -> None:
        """Stop taking events, let in-flight turns finish within `grace` seconds, release everything."""
        self.lanes.accepting = False
        if self._socket is not None:
            await self._socket.disconnect_async()
        if self._runner is not None:
            await self._runner.shutdown()
        grace = self.config.limits.shutdown_grace if grace is None else grace
        if self.work.running:
            await self.work.run(self._close_work(grace))
            await asyncio.to_thread(self.work.stop)
        else:
            await self.llm.aclose()
        if self._socket is not None:
            await self._socket.close_async()
            self._socket = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._prepared = False

    async def _close_work(self, grace: float) -> None:
        await self.lanes.close(grace)
        await self.board.close()
        if self.dispatcher.surface is not None:
            await self.dispatcher.surface.lines.close()
        if self._prepared:
            await self.store.close()
        await self.llm.aclose()
        session, self.work_client.session = self.work_client.session, None
        if session is not None:
            await session.close()


def freeze_startup_heap() -> None:
    """Keep the start-up heap (modules, SDKs, loaded packages) out of cyclic GC for the process's life.

    A full collection otherwise walks every one of those objects and pauses both loops for ~100 ms,
    which is most of the ack latency budget. For a long-running server process only (`serve`).
    """
    gc.collect()
    gc.freeze()


class PackageLoadFailed(CrewError):
    """A bound package is invalid: which one, and its problems (package-relative files)."""

    def __init__(self, path: Path, error: PackageInvalid) -> None:
        super().__init__(error.code, f"{path}: {error.message}", {"package": str(path)})
        self.path = path
        self.problems = error.problems


def load_packages(config: BotConfig, cache_dir: Path) -> dict[Path, Package]:
    """Load every bound package once; the first invalid one stops start-up with its problems."""
    loaded: dict[Path, Package] = {}
    for binding in config.bindings().values():
        for path in binding.packages:
            if path not in loaded:
                try:
                    loaded[path] = load_package(path, cache_dir=cache_dir)
                except PackageInvalid as exc:
                    raise PackageLoadFailed(path, exc) from None
    return loaded


def build(
    config: BotConfig,
    *,
    llm_settings: LLMSettings | None = None,
    owns: Callable[[ThreadKey], bool] | None = None,
) -> CrewBot:
    """Wire a bot from validated config. Raises PackageInvalid / CrewError for bad packages or model settings.

    `owns` limits the threads this process answers for at start-up (one worker of several, see pool.py).
    """
    store = RuntimeStore(config.home)
    runs = RunManager(store)
    llm = LLMClient(llm_settings or LLMSettings.from_env(model=config.model))
    engine = Engine(
        store,
        runs,
        llm,
        EngineSettings(
            max_turns_without_progress=config.limits.max_turns_without_progress,
            max_turns_per_pump=config.limits.max_turns_per_input,
            run_token_budget=config.limits.run_token_budget,
            system_policy=config.tool_policy,
            # Every run that may pump at once keeps its history in memory (~100 KB each) between turns.
            kept_histories=max(32, config.limits.max_concurrent_runs),
        ),
        ToolHost(),
    )
    packages = load_packages(config, store.packages_dir)
    bindings: dict[str, BindingRuntime] = {}
    checkouts: dict[tuple[Path | None, str | None], Checkout] = {}
    for name, binding in config.bindings().items():
        bound = [packages[p] for p in binding.packages]
        spec = binding.checkout_spec()
        checkout = checkouts.get((spec.project, spec.repo))
        if checkout is None:  # bindings sharing a project share its repository lock and clone
            checkout = checkouts[(spec.project, spec.repo)] = Checkout(spec, store.home, config.git.settings())
        service = SessionService(bound, checkout.root, engine, runs, surface="web", checkout=checkout)
        bindings[name] = BindingRuntime(
            name=name, project=checkout.root, packages=bound, service=service, checkout=checkout
        )

    token = config.slack.bot_token.get_secret_value() if config.slack.bot_token else None
    client = AsyncWebClient(token=token, base_url=config.slack.api_url)
    work_client = AsyncWebClient(token=token, base_url=config.slack.api_url)
    secret = config.slack.signing_secret.get_secret_value() if config.slack.signing_secret else ""
    bolt_logger = logging.getLogger("crewagent.bolt")
    level = bolt_logger.level
    bolt_logger.setLevel(logging.ERROR)  # Bolt warns that SLACK_BOT_TOKEN is unused when a client is given
    try:
        bolt_app = CrewBoltApp(client=client, signing_secret=secret, name="crewagent", logger=bolt_logger)
    finally:
        bolt_logger.setLevel(level)
    work = WorkLoop()
    io = SlackIO(work_client)
    thread_store = ThreadStore(store.home / "slack")
    lanes = ThreadLanes()
    board = StatusBoard(io, interval=config.limits.status_update_interval, rate=config.limits.status_edits_per_second)
    deduper = Deduper(thread_store)
    access = AccessPolicy(
        allowed_channels=frozenset(config.access.allowed_channels),
        allowed_users=frozenset(config.access.allowed_users),
        admins=frozenset(config.access.admins),
    )
    fallbacks = Fallbacks()
    lines = StatusLines(
        work_client,
        io,
        fallbacks,
        interval=config.limits.status_line_interval,
        rate=config.limits.status_lines_per_second,
    )

    def plan_source(record: ThreadRecord, snapshot: RunSnapshot) -> tuple[Graph, Callable[[str | None], str]] | None:
        runtime = bindings.get(record.binding) or bindings["default"]
        package = runtime.package(record.session.package_id)
        package = package or next((p for p in runtime.packages if p.workflow(snapshot.workflow_id)), None)
        workflow = package.workflow(snapshot.workflow_id) if package else None
        if package is None or workflow is None:
            return None

        def agent_name(agent_id: str | None) -> str:
            agent = package.agent(agent_id or "") if agent_id else None
            return agent.metadata.name if agent else snapshot.agent_name

        return workflow.graph, agent_name

    surface = AgentSurface(
        client=work_client,
        io=io,
        board=board,
        lines=lines,
        fallbacks=fallbacks,
        plan_source=plan_source,
        stop_run=engine.request_stop,
        stream_interval=config.limits.stream_flush_interval,
    )
    dispatcher = Dispatcher(
        config=config,
        io=io,
        store=thread_store,
        lanes=lanes,
        board=board,
        access=access,
        bindings=bindings,
        engine=engine,
        runs=runs,
        deduper=deduper,
        owns=owns,
        surface=surface,
    )
    Handlers(dispatcher, deduper, work).register(bolt_app)
    return CrewBot(
        config=config,
        bolt_app=bolt_app,
        client=client,
        work_client=work_client,
        work=work,
        store=thread_store,
        lanes=lanes,
        board=board,
        dispatcher=dispatcher,
        engine=engine,
        llm=llm,
    )

