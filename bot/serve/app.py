"""Assembly: config → engine, session services, the Bolt app, and the Socket Mode / HTTP front doors.

`build(config)` wires everything without touching the network; `start_socket()` or
`start_http()` opens the thread store, resumes runs a previous process left running (with a
database: joins the other replicas and takes over threads no live replica drives) and starts
taking events; `close()` stops taking events, gives in-flight turns a grace period to reach a
stop point (anything still running stays `running` and is resumed by the next start, or at once
by another replica), then releases everything.

Both connection modes serve GET /healthz over HTTP (for container health checks) from the start:
503 "not connected" until the bot token is checked (and, in Socket Mode, the socket is open). A
refused token ends start-up with `TokenRefused`; an unreachable Slack is retried with back-off.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_sdk.web.async_client import AsyncWebClient

from crewagent.core.api.checkout import Checkout
from crewagent.core.api.runs import Engine, EngineSettings, LLMClient, LLMSettings, RunManager, RunSnapshot
from crewagent.core.api.packages import Graph
from crewagent.core.api.sessions import SessionService
from crewagent.core.api.stores import RuntimeStore
from crewagent.core.api.tools import ToolHost

from ..access import AccessPolicy
from ..bolt_app import CrewBoltApp
from ..config import BotConfig
from ..inbox.file_inbox import FileInbox
from ..connection import FRESH_URL_SECONDS, Backoff, check_bot_token, connect_socket, issue_socket_url
from ..threads.event_claim import ClaimStore
from ..threads.channel_binding import BindingRuntime
from ..threads.assembly import Inbound, Outbound, build_thread_work
from ..threads.intake import ThreadIntake
from ..metrics import BotMetrics
from .observability import observe
from .front_door import EVENTS_PATH, events_app, health_app, numeric_timestamp, serve_web
from .handlers import Handlers
from .bound_packages import load_packages
from ..home import HomePublisher, wire_home
from ..threads.thread_worker import ThreadLanes
from ..native.fallbacks import Fallbacks
from ..outbox.courier import Courier
from ..outbox.given_up import owned_by
from ..outbox.sqlite_ledger import SqliteLedger
from ..slack_client import PacedWebClient
from ..slack_port import SlackPort
from ..status import StatusBoard
from ..native.status_line import StatusLines
from ..native.agent_session import AgentSessions
from ..native.surface import AgentSurface
from ..base.thread import ThreadRecord
from ..threads.store import ThreadStore

if TYPE_CHECKING:
    from ..replicas.handover import Handover
    from ..replicas.shared import SharedStore
    from ..replicas.slots import GlobalSlots
    from ..replicas.threads import PostgresThreadStore

log = logging.getLogger(__name__)

FINAL_EDITS_SECONDS = 1.0  # at shutdown, after the turns' grace
INDEX_FOLD_SECONDS = 30.0  # at shutdown: the run index's journal folded into runs-index.json


@dataclass(frozen=True)
class SlackParts:
    """How the bot talks to Slack: Bolt (events in) on its client, and the paced client the work sends with."""

    bolt_app: CrewBoltApp
    client: AsyncWebClient  # Bolt's (auth.test, Socket Mode)
    work_client: AsyncWebClient  # the port's (bot.slack_port): every send to Slack


class CrewBot:
    """The running bot: Bolt, the front door and the thread work on one event loop."""

    def __init__(
        self,
        *,
        config: BotConfig,
        slack: SlackParts,
        board: StatusBoard,
        dispatcher: ThreadIntake,
        engine: Engine,
        outbox: Courier,
        shared: SharedStore | None = None,
        slots: GlobalSlots | None = None,
    ) -> None:
        self.config = config
        self.bolt_app = slack.bolt_app
        self.client = slack.client  # Bolt's (auth.test, Socket Mode)
        self.work_client = slack.work_client  # the port's
        self.board = board
        self.dispatcher = dispatcher
        self.engine = engine
        self.outbox = outbox
        self.shared = shared
        self.slots = slots
        self.resumed = 0  # runs resumed (threads taken over) at start-up
        self.home: HomePublisher | None = None  # the Home tab's publisher
        self.metrics: BotMetrics | None = None  # GET /metrics (bot.metrics)
        self._prepared = False
        self._runner: web.AppRunner | None = None
        self._health_runner: web.AppRunner | None = None
        self._socket: AsyncSocketModeHandler | None = None
        self._token_checked = False  # HTTP mode is connected once Slack accepted the bot token
        self._store_open = False

    @property
    def store(self) -> ThreadStore | PostgresThreadStore:
        return self.dispatcher.state.store

    @property
    def lanes(self) -> ThreadLanes:
        return self.dispatcher.state.lanes

    @property
    def llm(self) -> LLMClient:
        return self.engine.llm

    @property
    def replica_id(self) -> str | None:
        return self.shared.replicas.id if self.shared else None

    # ---- lifecycle ------------------------------------------------------------------

    async def prepare(self) -> None:
        """Open the thread store, pick up runs a previous process (or a dead replica) left running."""
        if self._prepared:
            return
        # One pooled HTTP session for every Web API call the work makes.
        self.work_client.session = aiohttp.ClientSession()
        if self.shared is not None:
            await self.shared.open()
        await self.store.open()
        self._store_open = True  # closed even if a stop cuts the rest of start-up short
        if left := await self.outbox.open():  # what an earlier process could not send goes first
            log.info("sending messages a previous process left in the outbox", extra={"count": left})
        await self.dispatcher.settle_streams(self.outbox)  # before any run resumes or event replays
        await self.dispatcher.open_checkouts()
        if self.shared is not None and self.dispatcher.handover is not None:
            if self.slots is not None:
                await self.slots.prepare()
            self.resumed = await self.dispatcher.handover.start()
        else:
            self.resumed = await self.dispatcher.resume_interrupted()
            if replayed := await self.dispatcher.replay_pending():  # behind the resumed runs, before new events
                log.info("handling thread events a previous process took but did not finish", extra={"count": replayed})
        self._prepared = True
        packages = (p for b in self.dispatcher.bindings.values() for p in b.packages)
        await self.engine.tools.warm_up(self.engine.settings.system_policy.commands, packages)
        if self.resumed:
            log.info("resuming interrupted runs", extra={"count": self.resumed})

    async def idle(self, timeout: float | None = None) -> bool:
        """True once no thread work is queued or running (within `timeout` seconds)."""
        surface = self.dispatcher.surface
        return (
            await self.lanes.idle(timeout)
            and await self.board.idle(timeout)
            and (surface is None or await surface.idle(timeout))
            and await self.outbox.idle(timeout)
        )

    def web_app(self) -> web.Application:
        """POST /slack/events (Bolt verifies the signature and the 5-minute timestamp window), GET /healthz."""
        return events_app(self._handle_http, self._health, self.metrics.serve if self.metrics else None)

    async def _handle_http(self, request: web.Request) -> web.Response:
        if not self._prepared or not self.lanes.accepting:  # starting or stopping: Slack delivers it again later
            return web.Response(status=503, text="starting" if not self._prepared else "stopping")
        if not numeric_timestamp(request.headers.get("X-Slack-Request-Timestamp", "0")):
            return web.Response(status=401, text="invalid request")
        bolt_response = await self.bolt_app.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)

    async def slack_connected(self) -> bool:
        """Slack accepted the bot token, and in Socket Mode the websocket is open right now."""
        if self._socket is not None:
            return self._token_checked and await self._socket.client.is_connected()
        return self._token_checked

    async def _health(self, request: web.Request) -> web.Response:
        connected = await self.slack_connected()
        ok = self._prepared and connected
        body: dict[str, object] = {"ok": ok, "slack": "connected" if connected else "not connected",
                                   "busy_threads": len(self.lanes)}
        if self.shared is not None:
            body["replica"] = self.shared.replicas.id
            reachable = not self.shared.replicas.database_lost and await self.shared.reachable()
            body["database"] = "reachable" if reachable else "unreachable"
            body["ok"] = ok and reachable
            if not reachable:
                body["status"] = "database unreachable"
        if self.config.slack.mode == "socket":
            body["socket_mode"] = body["slack"]
        return web.json_response(body, status=200 if body["ok"] else 503)

    async def _check_bot_token(self, backoff: Backoff | None) -> None:
        await self.engine.tools.announce_sandbox(self.engine.settings.system_policy.commands)  # before Slack
        self.bolt_app.remember_identity(await check_bot_token(self.client, backoff or Backoff()))
        self._token_checked = True

    async def start_http(self, host: str = "0.0.0.0", port: int = 3000, *, backoff: Backoff | None = None) -> int:
        """Serve HTTP mode; returns the bound port (pass port=0 for an ephemeral one) once events are taken.

        The port answers at once (/healthz: 503 "not connected", events: 503) while the bot token is checked.
        """
        self._runner = runner = await serve_web(self.web_app(), lambda r: web.TCPSite(r, host, port))
        bound = int(runner.addresses[0][1])
        log.info("listening for Slack events", extra={"mode": "http", "host": host, "port": bound, "path": EVENTS_PATH})
        await self._check_bot_token(backoff)
        await self.prepare()
        return bound

    async def start_socket(
        self, *, health_host: str = "0.0.0.0", health_port: int | None = None, backoff: Backoff | None = None
    ) -> int | None:
        """Connect to Slack over Socket Mode (apps.connections.open goes to SLACK_API_URL too); with `health_port`,
        first serve GET /healthz and /metrics there (503 "not connected" until connected) and return its port."""
        app_token = self.config.slack.app_token
        if app_token is None:
            raise RuntimeError("Socket Mode needs SLACK_APP_TOKEN")
        bound = None
        if health_port is not None:
            health = health_app(self._health, self.metrics.serve if self.metrics else None)
            self._health_runner = runner = await serve_web(health, lambda r: web.TCPSite(r, health_host, health_port))
            bound = int(runner.addresses[0][1])
        await self._check_bot_token(backoff)
        # The SDK's own logger name: its reconnect notes are told apart from the bot's (no tracebacks).
        socket_log = logging.getLogger("crewagent.socket_mode")
        self._socket = handler = AsyncSocketModeHandler(
            self.bolt_app, app_token.get_secret_value(), web_client=self.client, logger=socket_log
        )
        url = await issue_socket_url(handler, backoff or Backoff())  # a refused app token stops us here
        issued = time.monotonic()
        await self.prepare()  # resumes interrupted runs: only once both tokens are known to work
        if time.monotonic() - issued > FRESH_URL_SECONDS:
            url = await issue_socket_url(handler, backoff or Backoff())
        await connect_socket(handler, url, backoff or Backoff())
        log.info("connected to Slack", extra={"mode": "socket"})
        return bound

    async def close(self, grace: float | None = None) -> None:
        """Stop taking events, let in-flight turns finish within `grace` seconds, release everything."""
        self.lanes.accepting = False
        if self._socket is not None and await self._socket.client.is_connected():
            await self._socket.disconnect_async()
        if self._runner is not None:
            await self._runner.shutdown()
        grace = self.config.limits.shutdown_grace if grace is None else grace
        await self.lanes.close(grace)
        await self.dispatcher.worker.close()  # what a cancelled job did not finish stays kept
        await self.engine.tools.close()
        if self.home is not None:
            await self.home.close()
        if self.dispatcher.surface is not None:
            await self.dispatcher.surface.close()
        try:  # the last status edits; a slow Slack must not hold up saving the thread store
            async with asyncio.timeout(FINAL_EDITS_SECONDS):
                await self.board.close()
        except TimeoutError:
            log.warning("the last status edits were not sent within %.0f s", FINAL_EDITS_SECONDS)
        await self.outbox.close(FINAL_EDITS_SECONDS)  # what is not sent by then stays recorded for the next start
        if self._prepared and self.dispatcher.handover is not None:
            await self.dispatcher.handover.stop()
        if self._store_open:
            await self.store.close()
        self._store_open = False
        await self.llm.aclose()
        session, self.work_client.session = self.work_client.session, None
        if session is not None:
            await session.close()
        if self._socket is not None:
            await self._socket.close_async()
            self._socket = None
        for runner in (self._runner, self._health_runner):
            if runner is not None:
                await runner.cleanup()
        self._runner = self._health_runner = None
        if self.shared is not None:
            await self.shared.close()
        else:  # a whole runs-index.json, for an earlier release (it reads only that) run next or beside
            try:  # a fold that fails is logged by the store
                await asyncio.wait_for(asyncio.to_thread(self.engine.store.close), INDEX_FOLD_SECONDS)
            except TimeoutError:  # the journal stays; `crewagent runs fold` folds it later
                log.warning("the run index was not folded within %.0f s at shutdown", INDEX_FOLD_SECONDS)
        self._prepared = False


def build(config: BotConfig, *, llm_settings: LLMSettings | None = None) -> CrewBot:
    """Wire a bot from validated config. Raises PackageInvalid / CrewError for bad packages, model settings
    or an unreachable database."""
    if not config.database_url:
        return _build(config, RuntimeStore(config.home), None, llm_settings)
    from ..replicas.shared import SharedStore

    shared = SharedStore.connect(config.database_url, config.home, config.lease_seconds)
    with ExitStack() as on_failure:  # a bot that cannot be built lets go of its database
        on_failure.callback(shared.sync_pool.close)
        on_failure.callback(shared.runtime.close)
        bot = _build(config, shared.runtime, shared, llm_settings)
        on_failure.pop_all()
    return bot


def _engine(config: BotConfig, store: RuntimeStore, runs: RunManager, llm: LLMClient) -> Engine:
    """The one engine every binding's runs share, with the configured limits and MCP servers."""
    return Engine(
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
        ToolHost.with_servers(config.mcp_servers, store.home),
    )


def _bindings(config: BotConfig, store: RuntimeStore, engine: Engine, runs: RunManager) -> dict[str, BindingRuntime]:
    """One runtime per channel binding: its packages, its project checkout and its session service."""
    packages = load_packages(config, store.packages_dir)
    bindings: dict[str, BindingRuntime] = {}
    checkouts: dict[tuple[Path | None, str | None], Checkout] = {}
    for name, binding in config.bindings().items():
        bound = [packages[p] for p in binding.packages]
        spec = binding.checkout_spec()
        checkout = checkouts.get((spec.project, spec.repo))
        if checkout is None:  # bindings sharing a project share its repository lock and clone
            checkout = checkouts[(spec.project, spec.repo)] = Checkout(spec, store.home, config.git.settings())
        service = SessionService(bound, checkout.root, engine, runs, surface="web", checkout=checkout,
                                 models=config.models)
        bindings[name] = BindingRuntime(
            name=name, project=checkout.root, packages=bound, service=service, checkout=checkout
        )
    return bindings


def _bolt_app(config: BotConfig, client: AsyncWebClient) -> CrewBoltApp:
    """The Bolt app on our own client, without Bolt's start-up warning about the unused token."""
    secret = config.slack.signing_secret.get_secret_value() if config.slack.signing_secret else ""
    bolt_logger = logging.getLogger("crewagent.bolt")
    level = bolt_logger.level
    bolt_logger.setLevel(logging.ERROR)  # Bolt warns that SLACK_BOT_TOKEN is unused when a client is given
    try:
        # process_before_response: an event is queued for its thread before Slack gets the ack, so
        # events acked one after the other are handled in that order, whichever replica got them.
        return CrewBoltApp(
            client=client, signing_secret=secret, name="crewagent", logger=bolt_logger, process_before_response=True
        )
    finally:
        bolt_logger.setLevel(level)


def _agent_surface(
    config: BotConfig,
    io: SlackPort,
    board: StatusBoard,
    bindings: dict[str, BindingRuntime],
    engine: Engine,
) -> AgentSurface:
    """How runs show in Slack: status board, status lines, streamed text and the plan of each workflow."""
    fallbacks = Fallbacks()
    lines = StatusLines(
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

    return AgentSurface(
        io=io,
        board=board,
        lines=lines,
        sessions=AgentSessions(io, fallbacks),
        fallbacks=fallbacks,
        plan_source=plan_source,
        stop_run=engine.request_stop,
        stream_interval=config.limits.stream_flush_interval,
    )


def _build(
    config: BotConfig, store: RuntimeStore, shared: SharedStore | None, llm_settings: LLMSettings | None
) -> CrewBot:
    runs = RunManager(store)
    llm = LLMClient(
        llm_settings
        or LLMSettings.from_env(
            model=config.model,
            timeout=config.llm.timeout_seconds,
            max_retries=config.llm.max_retries,
            stream=config.llm.stream,
        )
    )
    engine = _engine(config, store, runs, llm)
    bindings = _bindings(config, store, engine, runs)
    token = config.slack.bot_token.get_secret_value() if config.slack.bot_token else None
    client = AsyncWebClient(token=token, base_url=config.slack.api_url)
    work_client = PacedWebClient(token=token, base_url=config.slack.api_url)
    bolt_app = _bolt_app(config, client)
    metrics = observe(config, llm, store, bolt_app, work_client)  # usage, metrics, traces
    io = SlackPort(work_client, before_send=shared.flush if shared is not None else None)
    lanes = ThreadLanes()
    thread_store: ThreadStore | PostgresThreadStore
    inbox: FileInbox | None = None
    claims: ClaimStore
    handover: Handover | None = None
    slots: GlobalSlots | None = None
    if shared is not None:
        thread_store, handover, slots, outbox, claims = shared.parts(lanes, io, config.limits.max_concurrent_runs)
    else:
        thread_store = ThreadStore(store.home / "slack")
        # The embedded inbox; its rows are the events' dedupe claims too.
        inbox = FileInbox(store.home / "slack" / "inbox.sqlite", earlier=store.home / "slack" / "pending.sqlite")
        claims = inbox
        outbox = Courier(work_client, SqliteLedger(store.home / "slack" / "outbox.sqlite"))
    io.outbox = outbox
    board = StatusBoard(
        io,
        interval=config.limits.status_update_interval,
        rate=config.limits.status_edits_per_second,
        burst=config.limits.status_edit_burst,
    )
    access = AccessPolicy(
        allowed_channels=frozenset(config.access.allowed_channels),
        allowed_users=frozenset(config.access.allowed_users),
        admins=frozenset(config.access.admins),
    )
    surface = _agent_surface(config, io, board, bindings, engine)
    dispatcher = build_thread_work(
        config=config, engine=engine, bindings=bindings, store=thread_store, access=access,
        inbound=Inbound(lanes, claims, inbox=inbox, handover=handover, slots=slots),
        outbound=Outbound(io, board, surface),
    )
    Handlers(dispatcher, io).register(bolt_app)
    home = wire_home(
        bolt_app, port=io, store=thread_store, runs=runs, access=access,
        bindings=bindings, dispatcher=dispatcher, refresh_interval=config.limits.home_refresh_interval,
    )
    bot = CrewBot(
        config=config,
        slack=SlackParts(bolt_app, client, work_client),
        board=board,
        dispatcher=dispatcher,
        engine=engine,
        outbox=outbox,
        shared=shared,
        slots=slots,
    )
    bot.home = home
    bot.metrics = metrics
    local_inbox = inbox if handover is None else handover.away
    if metrics is not None:
        metrics.watch_outbox(outbox.waiting)
        if local_inbox is not None:
            shared_inbox = handover.waiting_in_database if handover is not None else None
            metrics.watch_inbox(lambda: (local_inbox.waiting_count, local_inbox.oldest_waiting()), shared_inbox)
    home.undelivered = owned_by(thread_store, outbox.ledger)  # shown on the owner's Home tab
    return bot
