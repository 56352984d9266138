"""A fake Slack Web API on loopback, recording every call.

Point the real SDK at it with `AsyncWebClient(base_url=slack.api_url)` (note
the trailing slash: slack_sdk joins URLs with `urljoin`, so a base URL
without it silently drops the `/api` segment).

    async with FakeSlack() as slack:
        client = slack.client()
        await client.chat_postMessage(channel="C1", text="hi")
        params = await slack.wait_for("chat.postMessage")
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple, Self, TypeAlias

import yaml
from aiohttp import web
from slack_sdk.web.async_client import AsyncWebClient

from ._server import LoopbackServer
from .socket_mode import SocketModeServer
from tests.support.paths import REPO

BOT_TOKEN = "xoxb-fake-bot-token"
APP_TOKEN = "xapp-1-A1-fake-app-token"

# Fields slack_sdk may send as JSON strings (form/query) or as JSON (body);
# decoded so tests see the same shape whichever transport the SDK picked.
_JSON_FIELDS = frozenset({"blocks", "attachments", "view", "files", "metadata", "prompts", "chunks", "loading_messages"})

# Methods that are not Web API calls but are recorded alongside them.
UPLOAD = "upload"
RESPONSE_URL = "response_url"
STREAMED = "streamed"
"""Recorded when a stream is finished (chat.stopStream): the whole message as users now see it."""

MANIFEST = REPO / "manifest.yml"

# The bot scopes that let a token call each method (any one of them), as Slack's method pages list them.
METHOD_SCOPES: dict[str, frozenset[str]] = {
    "chat.postMessage": frozenset({"chat:write"}),
    "chat.update": frozenset({"chat:write"}),
    "chat.delete": frozenset({"chat:write"}),
    "chat.postEphemeral": frozenset({"chat:write"}),
    "chat.startStream": frozenset({"chat:write"}),
    "chat.appendStream": frozenset({"chat:write"}),
    "chat.stopStream": frozenset({"chat:write"}),
    "assistant.threads.setStatus": frozenset({"chat:write", "assistant:write"}),
    "assistant.threads.setTitle": frozenset({"assistant:write"}),
    "assistant.threads.setSuggestedPrompts": frozenset({"assistant:write"}),
    "agents.sessions.setStatus": frozenset({"chat:write"}),
    "agents.sessions.rename": frozenset({"chat:write"}),
    "reactions.add": frozenset({"reactions:write"}),
    "reactions.remove": frozenset({"reactions:write"}),
    "files.getUploadURLExternal": frozenset({"files:write"}),
    "files.completeUploadExternal": frozenset({"files:write"}),
    "conversations.info": frozenset({"channels:read", "groups:read", "im:read", "mpim:read"}),
    "conversations.replies": frozenset({"channels:history", "groups:history", "im:history", "mpim:history"}),
    "users.info": frozenset({"users:read"}),
    "team.info": frozenset({"team:read"}),
}
SESSION_STATUSES = frozenset({"active", "processing", "suspended", "closed"})
CHUNK_TYPES = frozenset({"markdown_text", "plan_update", "task_update", "blocks"})
TEXT_LIMIT = 12_000  # `markdown_text` of one chat.startStream / appendStream / stopStream call
STREAMED_MESSAGE_LIMIT = 12_000  # a streamed message's markdown in all (a message's markdown blocks hold as much)
MAX_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
MAX_LOADING_MESSAGES = 10
MAX_PROMPTS = 4


def manifest_commands(path: Path = MANIFEST) -> frozenset[str]:
    """The slash commands the app declares (Slack delivers no other)."""
    manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
    return frozenset(str(c["command"]) for c in (manifest.get("features") or {}).get("slash_commands") or [])


def manifest_scopes(path: Path = MANIFEST) -> frozenset[str]:
    """The bot scopes an install of the app from this manifest grants."""
    manifest = yaml.safe_load(path.read_text(encoding="utf-8"))
    return frozenset(manifest["oauth_config"]["scopes"]["bot"])


class SlackCall(NamedTuple):
    """One recorded call; unpacks as `(method, params)`."""

    method: str
    params: dict[str, Any]


@dataclass(frozen=True)
class RecordedRequest:
    """Transport details of a call, for tests that care about them."""

    method: str
    params: dict[str, Any]
    token: str | None
    http_method: str
    content_type: str
    headers: dict[str, str]


@dataclass
class UploadedFile:
    """A file moving through the files_upload_v2 three-step flow."""

    id: str
    filename: str
    length: int
    content: bytes | None = None
    title: str | None = None
    channel: str | None = None
    thread_ts: str | None = None
    initial_comment: str | None = None
    completed: bool = False


OutageKind: TypeAlias = Literal["unavailable", "ratelimited", "reset"]


@dataclass
class Outage:
    """Every Web API call fails while it lasts: HTTP 503, 429 with Retry-After, or a reset connection."""

    kind: OutageKind
    retry_after: int = 0
    until: float = float("inf")  # time.monotonic() at which it ends by itself
    answered: list[tuple[str, float]] = field(default_factory=list)  # (method, monotonic time) of each failed call


@dataclass
class HeldCall:
    """A call the fake keeps unanswered (see `FakeSlack.hold`): recorded, then answered once released."""

    method: str
    predicate: Callable[[dict[str, Any]], bool] | None
    reached: asyncio.Event = field(default_factory=asyncio.Event)  # the call arrived and waits
    released: asyncio.Event = field(default_factory=asyncio.Event)
    done: asyncio.Event = field(default_factory=asyncio.Event)  # released and answered: what it asked is in effect
    params: dict[str, Any] = field(default_factory=dict)  # what the held call carried

    def release(self) -> None:
        self.released.set()


@dataclass
class _Failure:
    error: str
    status: int
    retry_after: int
    remaining: int


ApiResult: TypeAlias = dict[str, Any]
Override: TypeAlias = Mapping[str, Any] | Callable[[dict[str, Any]], Mapping[str, Any]]


@dataclass
class _Api:
    """What a method handler sees: its params and the caller's token."""

    params: dict[str, Any]
    token: str | None
    extra_headers: dict[str, str] = field(default_factory=dict)


class FakeSlack(LoopbackServer):
    """Fake Web API with realistic responses for the methods the bot uses.

    Also serves the files_upload_v2 upload URL, Bolt `respond()` URLs
    (`response_url()`), and the Socket Mode websocket (`socket_mode`).
    """

    def __init__(
        self,
        *,
        team_id: str = "T1",
        team: str = "Team One",
        bot_user_id: str = "UBOT",
        bot_id: str = "BBOT",
        app_id: str = "A1",
        scopes: Iterable[str] | None = None,
        port: int = 0,
    ) -> None:
        """`scopes` granted to the bot token; by default what manifest.yml asks for, so a method the
        code calls without the manifest granting it fails with `missing_scope`, as it would in Slack."""
        super().__init__(port=port)
        self.refused_tokens: dict[str, str] = {}
        """Tokens Slack refuses, with its error (`invalid_auth`, `token_revoked`, …), for every method."""
        self.scopes = frozenset(manifest_scopes() if scopes is None else scopes)
        self.team_id = team_id
        self.team = team
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.app_id = app_id
        self.socket_mode = SocketModeServer(app_id=app_id)
        self.calls: list[SlackCall] = []
        self.refusals: list[SlackCall] = []
        """Calls a method itself refused (ok false: a limit, a state, an argument), with its error as `error`."""
        self.call_times: list[float] = []
        """time.monotonic() of each recorded call, beside `calls`."""
        self.requests: list[RecordedRequest] = []
        self.outages: list[Outage] = []
        """Every outage so far, the current one last (see `fail_everything`)."""
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        """Live messages by (channel, ts): posted, seeded, updated; deleted ones removed."""
        self.reactions: set[tuple[str, str, str]] = set()
        """(channel, timestamp, name) of reactions currently on messages."""
        self.files: dict[str, UploadedFile] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        """conversations.info overrides by channel id (merged over defaults)."""
        self.users: dict[str, dict[str, Any]] = {}
        """users.info overrides by user id (merged over defaults)."""
        self.streams: dict[tuple[str, str], str] = {}
        """State of streamed messages by (channel, ts): "streaming", "stopped_by_user", "expired", "done"."""
        self.statuses: dict[tuple[str, str], dict[str, Any]] = {}
        """The assistant status line each thread shows now, by (channel_id, thread_ts)."""
        self.home_views: dict[str, dict[str, Any]] = {}
        """The Home tab each user sees now (views.publish), by user id."""
        self.sessions: dict[tuple[str, str], dict[str, Any]] = {}
        """Each thread's agent session now (status, title), by (channel_id, thread_ts)."""
        self.sessions_refused: str | None = None
        """When set, the agents.sessions.* methods fail with this error (`not_allowed`, `unknown_method`…)."""
        self.commands = manifest_commands()
        """Slash commands the app declares; a delivery of any other is refused."""
        self._respond_ids = itertools.count(1)
        self._overrides: dict[str, Override] = {}
        self._failures: dict[str, list[_Failure]] = {}
        self._holds: list[HeldCall] = []
        self._ts = itertools.count(100, 100)
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()
        self._pending_records: list[SlackCall] = []  # recorded after the call that made them
        self._handlers: dict[str, Callable[[_Api], ApiResult]] = {
            "auth.test": self._auth_test,
            "apps.connections.open": self._apps_connections_open,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.delete": self._chat_delete,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "reactions.add": self._reactions_add,
            "reactions.remove": self._reactions_remove,
            "views.open": self._views_open,
            "views.push": self._views_open,
            "views.update": self._views_update,
            "views.publish": self._views_publish,
            "conversations.info": self._conversations_info,
            "conversations.replies": self._conversations_replies,
            "users.info": self._users_info,
            "files.getUploadURLExternal": self._files_get_upload_url,
            "files.completeUploadExternal": self._files_complete_upload,
            "assistant.threads.setStatus": self._set_status,
            "assistant.threads.setTitle": self._set_title,
            "assistant.threads.setSuggestedPrompts": self._set_suggested_prompts,
            "agents.sessions.setStatus": self._session_status,
            "agents.sessions.rename": self._session_rename,
            "chat.startStream": self._start_stream,
            "chat.appendStream": self._append_stream,
            "chat.stopStream": self._stop_stream,
        }

    # ---- test API --------------------------------------------------------

    @property
    def api_url(self) -> str:
        """Base URL for `AsyncWebClient(base_url=...)`, trailing slash included."""
        return f"{self.url}/api/"

    def client(self, token: str = BOT_TOKEN, **kwargs: Any) -> AsyncWebClient:
        """A real AsyncWebClient aimed at this fake."""
        return AsyncWebClient(token=token, base_url=self.api_url, **kwargs)

    def calls_to(self, method: str) -> list[dict[str, Any]]:
        """Params of every call to `method`, oldest first."""
        return [call.params for call in self.calls if call.method == method]

    async def wait_for(
        self,
        method: str | tuple[str, ...],
        predicate: Callable[[dict[str, Any]], bool] | None = None,
        timeout: float = 30.0,
        *,
        since: int = 0,
    ) -> dict[str, Any]:
        """Params of the first call to `method` (or any of several) at index >= `since` that
        satisfies `predicate`, waiting for it if needed (pass
        `since=len(slack.calls)` to ignore earlier calls)."""
        methods = (method,) if isinstance(method, str) else method

        def find() -> dict[str, Any] | None:
            for call in self.calls[since:]:
                if call.method in methods and (predicate is None or predicate(call.params)):
                    return call.params
            return None

        try:
            async with asyncio.timeout(timeout):
                async with self._changed:
                    await self._changed.wait_for(lambda: find() is not None)
        except TimeoutError:
            seen = [call.method for call in self.calls[since:]]
            raise AssertionError(f"no matching {method} call within {timeout}s; calls seen: {seen}") from None
        found = find()
        assert found is not None
        return found

    def fail_next(
        self,
        method: str,
        error: str = "ratelimited",
        status: int | None = None,
        *,
        times: int = 1,
        retry_after: int = 0,
    ) -> None:
        """Make the next `times` calls to `method` fail with `error`.

        Status defaults to 429 (with `Retry-After`) for "ratelimited" and to
        200 otherwise, as Slack reports most errors with HTTP 200.
        """
        if status is None:
            status = 429 if error == "ratelimited" else 200
        self._failures.setdefault(method, []).append(_Failure(error, status, retry_after, times))

    def hold(self, method: str, predicate: Callable[[dict[str, Any]], bool] | None = None) -> HeldCall:
        """The next call to `method` that `predicate` accepts is recorded and then kept unanswered until the
        returned hold is released, so a test acts while that call is certainly in flight. Released, it is
        answered as any call: Slack does what a request asked even when its caller stopped listening."""
        held = HeldCall(method, predicate)
        self._holds.append(held)
        return held

    async def _wait_if_held(self, method: str, params: dict[str, Any]) -> HeldCall | None:
        for held in self._holds:
            if held.method == method and (held.predicate is None or held.predicate(params)):
                self._holds.remove(held)
                held.params = params
                held.reached.set()
                await held.released.wait()
                return held
        return None

    def stop_failing(self, method: str) -> None:
        """Calls to `method` succeed again (what `fail_next` queued for it is dropped)."""
        self._failures.pop(method, None)

    def fail_everything(self, kind: OutageKind = "unavailable", *, seconds: float | None = None, retry_after: int = 0) -> Outage:
        """From now on every Web API call fails (`unavailable`: HTTP 503 service_unavailable; `ratelimited`:
        429 with `Retry-After: retry_after`; `reset`: the connection is dropped without an answer), for
        `seconds` or until `recover()`. Calls are still recorded (with their times)."""
        until = time.monotonic() + seconds if seconds is not None else float("inf")
        outage = Outage(kind, retry_after=retry_after, until=until)
        self.outages.append(outage)
        return outage

    def recover(self) -> float:
        """End the current outage; returns the monotonic time it ended."""
        now = time.monotonic()
        if self.outages:
            self.outages[-1].until = min(self.outages[-1].until, now)
        return now

    def _current_outage(self) -> Outage | None:
        outage = self.outages[-1] if self.outages else None
        return outage if outage is not None and time.monotonic() < outage.until else None

    def set_response(self, method: str, response: Override) -> None:
        """Replace a method's answer with a fixed dict or `fn(params) -> dict`."""
        self._overrides[method] = response

    def response_url(self, name: str = "r1") -> str:
        """A `response_url` for interaction payloads; POSTs to it are
        recorded as calls to "response_url" (name under key "_name")."""
        return f"{self.url}/respond/{name}"

    def command_payload(
        self,
        command: str,
        text: str = "",
        *,
        user: str = "U1",
        channel: str = "C1",
        user_name: str | None = None,
        channel_name: str | None = None,
    ) -> dict[str, Any]:
        """A slash-command delivery as Slack sends it, with a `response_url` served here.

        Slack delivers only commands the app declares, and only with the `commands` scope granted:
        anything else is refused here (AssertionError), as it never reaches the app in Slack.
        """
        if command not in self.commands:
            raise AssertionError(f"manifest.yml declares no {command} (declared: {sorted(self.commands)})")
        if "commands" not in self.scopes:
            raise AssertionError(f"{command} needs the commands scope, which the app is not granted")
        return {
            "token": "fake-verification-token",
            "team_id": self.team_id,
            "team_domain": self.team.lower().replace(" ", "-"),
            "channel_id": channel,
            "channel_name": channel_name or ("directmessage" if channel.startswith("D") else f"channel-{channel.lower()}"),
            "user_id": user,
            "user_name": user_name or f"user-{user.lower()}",
            "command": command,
            "text": text,
            "api_app_id": self.app_id,
            "is_enterprise_install": "false",
            "response_url": self.response_url(f"cmd{next(self._respond_ids)}"),
            "trigger_id": f"{next(self._ids)}.{self.team_id}.fake",
        }

    def responses(self, name: str | None = None) -> list[dict[str, Any]]:
        """What was posted to response URLs (optionally one of them), oldest first."""
        return [p for p in self.calls_to(RESPONSE_URL) if name is None or p.get("_name") == name]

    def stop_stream_by_user(self, channel: str, ts: str) -> None:
        """The user pressed the stop control on a streaming message: later appends are refused."""
        self.streams[(channel, ts)] = "stopped_by_user"

    def expire_stream(self, channel: str, ts: str) -> None:
        """Slack ended the stream on its side (it was idle too long)."""
        self.streams[(channel, ts)] = "expired"

    def add_message(
        self,
        channel: str,
        text: str,
        *,
        user: str = "U1",
        ts: str | None = None,
        thread_ts: str | None = None,
    ) -> dict[str, Any]:
        """Seed a human message (e.g. a thread parent) for conversations.replies."""
        ts = ts or self._next_ts()
        message: dict[str, Any] = {"type": "message", "user": user, "text": text, "ts": ts, "team": self.team_id}
        if thread_ts:
            message["thread_ts"] = thread_ts
        self.messages[(channel, ts)] = message
        return message

    # ---- server ----------------------------------------------------------

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._api)
        app.router.add_post("/upload/v1/{file_id}", self._upload)
        app.router.add_post("/respond/{name}", self._respond)
        self.socket_mode.install(app)
        return app

    async def start(self) -> Self:
        """Start, then point the mounted Socket Mode endpoint at our origin."""
        await super().start()
        self.socket_mode.bind_origin(self.url)
        return self

    async def _before_stop(self) -> None:
        await self.socket_mode.close_connections()

    async def _record(self, call: SlackCall, request: RecordedRequest | None = None) -> None:
        async with self._changed:
            self.calls.append(call)
            self.call_times.append(time.monotonic())
            if request is not None:
                self.requests.append(request)
            self._changed.notify_all()

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await _read_params(request)
        token = _bearer_token(request) or _pop_str(params, "token")
        headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        await self._record(
            SlackCall(method, params),
            RecordedRequest(method, params, token, request.method, request.content_type, headers),
        )
        held = await self._wait_if_held(method, params)
        try:
            return await self._answer(request, method, params, token)
        finally:
            if held is not None:
                held.done.set()

    async def _answer(
        self, request: web.Request, method: str, params: dict[str, Any], token: str | None
    ) -> web.Response:
        outage = self._current_outage()
        if outage is not None:
            outage.answered.append((method, time.monotonic()))
            if outage.kind == "reset":
                assert request.transport is not None
                request.transport.abort()  # the client sees the connection drop without an answer
                return web.Response(status=500)
            if outage.kind == "ratelimited":
                headers = {"Retry-After": str(outage.retry_after)}
                return web.json_response({"ok": False, "error": "ratelimited"}, status=429, headers=headers)
            return web.json_response({"ok": False, "error": "service_unavailable"}, status=503)

        failure = self._take_failure(method)
        if failure is not None:
            extra = {"Retry-After": str(failure.retry_after)} if failure.status == 429 else {}
            return web.json_response({"ok": False, "error": failure.error}, status=failure.status, headers=extra)

        auth_error = self._check_token(method, token)
        if auth_error is not None:
            return web.json_response({"ok": False, "error": auth_error})
        needed = METHOD_SCOPES.get(method)
        if needed is not None and not needed & self.scopes:
            missing = {"ok": False, "error": "missing_scope", "needed": ",".join(sorted(needed))}
            return web.json_response({**missing, "provided": ",".join(sorted(self.scopes))})

        api = _Api(params=params, token=token)
        override = self._overrides.get(method)
        if override is not None:
            result = dict(override(params) if callable(override) else override)
        elif method in self._handlers:
            result = self._handlers[method](api)
        else:
            result = {"ok": False, "error": "unknown_method", "req_method": method}
        if not result.get("ok"):
            self.refusals.append(SlackCall(method, {**params, "error": result.get("error")}))
        while self._pending_records:
            await self._record(self._pending_records.pop(0))
        return web.json_response(result, headers=api.extra_headers)

    def _take_failure(self, method: str) -> _Failure | None:
        queue = self._failures.get(method)
        if not queue:
            return None
        failure = queue[0]
        failure.remaining -= 1
        if failure.remaining <= 0:
            queue.pop(0)
        return failure

    def _check_token(self, method: str, token: str | None) -> str | None:
        if not token:
            return "not_authed"
        if token in self.refused_tokens:
            return self.refused_tokens[token]
        if method == "apps.connections.open":
            return None if token.startswith("xapp-") else "not_allowed_token_type"
        if token.startswith("xapp-"):
            return "not_allowed_token_type"
        if not token.startswith("xox"):
            return "invalid_auth"
        return None

    async def _upload(self, request: web.Request) -> web.Response:
        file_id = request.match_info["file_id"]
        content = await request.read()
        upload = self.files.get(file_id)
        await self._record(SlackCall(UPLOAD, {"file_id": file_id, "length": len(content)}))
        if upload is None:
            return web.Response(status=404, text="unknown upload url")
        upload.content = content
        return web.Response(text=f"OK - {len(content)}")

    async def _respond(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            body = {"_raw": await request.text()}
        params = dict(body) if isinstance(body, dict) else {"_body": body}
        params["_name"] = request.match_info["name"]
        await self._record(SlackCall(RESPONSE_URL, params))
        return web.Response(text="ok")

    # ---- method handlers -------------------------------------------------

    def _next_ts(self) -> str:
        n = next(self._ts)
        return f"{1700000000 + n // 1_000_000}.{n % 1_000_000:06d}"

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):08d}"

    def _auth_test(self, api: _Api) -> ApiResult:
        return {
            "ok": True,
            "url": f"https://{self.team.lower().replace(' ', '-')}.slack.com/",
            "team": self.team,
            "user": "crewagent",
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "is_enterprise_install": False,
        }

    def _apps_connections_open(self, api: _Api) -> ApiResult:
        return {"ok": True, "url": self.socket_mode.issue_url()}

    def _bot_message(self, params: dict[str, Any], ts: str) -> dict[str, Any]:
        message: dict[str, Any] = {
            "type": "message",
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "team": self.team_id,
            "text": params.get("text") or "",
            "ts": ts,
        }
        for key in ("blocks", "attachments", "metadata", "thread_ts"):
            if params.get(key):
                message[key] = params[key]
        return message

    def _chat_post_message(self, api: _Api) -> ApiResult:
        params = api.params
        channel = params.get("channel")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not (params.get("text") or params.get("blocks") or params.get("attachments")):
            return {"ok": False, "error": "no_text"}
        ts = self._next_ts()
        message = self._bot_message(params, ts)
        self.messages[(channel, ts)] = message
        self.statuses.pop((str(channel), str(params.get("thread_ts"))), None)  # a reply clears the status line
        return {"ok": True, "channel": channel, "ts": ts, "message": message}

    def _chat_update(self, api: _Api) -> ApiResult:
        channel, ts = api.params.get("channel"), api.params.get("ts")
        message = self.messages.get((str(channel), str(ts)))
        if message is None:
            return {"ok": False, "error": "message_not_found"}
        if message.get("user") != self.bot_user_id:
            return {"ok": False, "error": "cant_update_message"}
        for key in ("text", "blocks", "attachments", "metadata"):
            if key in api.params:
                message[key] = api.params[key]
        message["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}
        return {"ok": True, "channel": channel, "ts": ts, "text": message.get("text", ""), "message": message}

    def _chat_delete(self, api: _Api) -> ApiResult:
        channel, ts = str(api.params.get("channel")), str(api.params.get("ts"))
        if self.messages.pop((channel, ts), None) is None:
            return {"ok": False, "error": "message_not_found"}
        return {"ok": True, "channel": channel, "ts": ts}

    def _chat_post_ephemeral(self, api: _Api) -> ApiResult:
        if not api.params.get("channel"):
            return {"ok": False, "error": "channel_not_found"}
        if not api.params.get("user"):
            return {"ok": False, "error": "user_not_in_channel"}
        return {"ok": True, "message_ts": self._next_ts()}

    def _reaction_key(self, api: _Api) -> tuple[str, str, str] | None:
        channel, ts, name = (api.params.get(k) for k in ("channel", "timestamp", "name"))
        if not (channel and ts and name):
            return None
        return str(channel), str(ts), str(name)

    def _reactions_add(self, api: _Api) -> ApiResult:
        key = self._reaction_key(api)
        if key is None:
            return {"ok": False, "error": "invalid_arguments"}
        if key in self.reactions:
            return {"ok": False, "error": "already_reacted"}
        self.reactions.add(key)
        return {"ok": True}

    def _reactions_remove(self, api: _Api) -> ApiResult:
        key = self._reaction_key(api)
        if key is None:
            return {"ok": False, "error": "invalid_arguments"}
        if key not in self.reactions:
            return {"ok": False, "error": "no_reaction"}
        self.reactions.discard(key)
        return {"ok": True}

    def _render_view(self, view: Any, view_id: str | None = None) -> dict[str, Any]:
        spec = view if isinstance(view, dict) else {}
        view_id = view_id or self._next_id("V")
        return {
            "id": view_id,
            "team_id": self.team_id,
            "type": spec.get("type", "modal"),
            "title": spec.get("title"),
            "submit": spec.get("submit"),
            "close": spec.get("close"),
            "blocks": spec.get("blocks", []),
            "private_metadata": spec.get("private_metadata", ""),
            "callback_id": spec.get("callback_id", ""),
            "external_id": spec.get("external_id", ""),
            "state": {"values": {}},
            "hash": self._next_id("h"),
            "clear_on_close": bool(spec.get("clear_on_close", False)),
            "notify_on_close": bool(spec.get("notify_on_close", False)),
            "root_view_id": view_id,
            "previous_view_id": None,
            "app_id": self.app_id,
            "app_installed_team_id": self.team_id,
            "bot_id": self.bot_id,
        }

    def _views_open(self, api: _Api) -> ApiResult:
        if not api.params.get("trigger_id") and not api.params.get("interactivity_pointer"):
            return {"ok": False, "error": "invalid_arguments"}
        if not isinstance(api.params.get("view"), dict):
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True, "view": self._render_view(api.params["view"])}

    def _views_update(self, api: _Api) -> ApiResult:
        view_id = api.params.get("view_id")
        if not (view_id or api.params.get("external_id")) or not isinstance(api.params.get("view"), dict):
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True, "view": self._render_view(api.params["view"], view_id and str(view_id))}

    def _views_publish(self, api: _Api) -> ApiResult:
        view = api.params.get("view")
        if not api.params.get("user_id") or not isinstance(view, dict):
            return {"ok": False, "error": "invalid_arguments"}
        if view.get("type") != "home":
            return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": ["[ERROR] home only"]}}
        if len(view.get("blocks") or []) > MAX_VIEW_BLOCKS:
            messages = ["[ERROR] no more than 100 items allowed [json-pointer:/view/blocks]"]
            return {"ok": False, "error": "invalid_arguments", "response_metadata": {"messages": messages}}
        rendered = self._render_view(view)
        self.home_views[str(api.params["user_id"])] = rendered
        return {"ok": True, "view": rendered}

    def _conversations_info(self, api: _Api) -> ApiResult:
        channel = api.params.get("channel")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        channel = str(channel)
        kind = channel[:1]
        info: dict[str, Any] = {
            "id": channel,
            "name": f"channel-{channel.lower()}",
            "is_channel": kind == "C",
            "is_group": kind == "G",
            "is_im": kind == "D",
            "is_mpim": False,
            "is_private": kind in ("G", "D"),
            "is_archived": False,
            "is_member": True,
            "created": 1700000000,
            "creator": "U1",
            "context_team_id": self.team_id,
        }
        if kind == "D":
            info["user"] = "U1"
        info.update(self.channels.get(channel, {}))
        return {"ok": True, "channel": info}

    def _conversations_replies(self, api: _Api) -> ApiResult:
        channel, ts = str(api.params.get("channel")), str(api.params.get("ts"))
        thread = [
            message
            for (ch, msg_ts), message in self.messages.items()
            if ch == channel and (msg_ts == ts or message.get("thread_ts") == ts)
        ]
        if not thread:
            return {"ok": False, "error": "thread_not_found"}
        thread.sort(key=lambda m: float(m["ts"]))
        return {"ok": True, "messages": thread, "has_more": False, "response_metadata": {"next_cursor": ""}}

    def _users_info(self, api: _Api) -> ApiResult:
        user = api.params.get("user")
        if not user:
            return {"ok": False, "error": "user_not_found"}
        user = str(user)
        info: dict[str, Any] = {
            "id": user,
            "team_id": self.team_id,
            "name": f"user-{user.lower()}",
            "real_name": f"User {user}",
            "deleted": False,
            "is_bot": user == self.bot_user_id,
            "is_admin": False,
            "tz": "UTC",
            "tz_offset": 0,
            "profile": {"real_name": f"User {user}", "display_name": f"user-{user.lower()}"},
        }
        info.update(self.users.get(user, {}))
        return {"ok": True, "user": info}

    def _files_get_upload_url(self, api: _Api) -> ApiResult:
        filename, length = api.params.get("filename"), api.params.get("length")
        if not filename or length is None:
            return {"ok": False, "error": "invalid_arguments"}
        file_id = self._next_id("F")
        self.files[file_id] = UploadedFile(id=file_id, filename=str(filename), length=int(length))
        return {"ok": True, "upload_url": f"{self.url}/upload/v1/{file_id}", "file_id": file_id}

    def _files_complete_upload(self, api: _Api) -> ApiResult:
        specs = api.params.get("files")
        if not isinstance(specs, list) or not specs:
            return {"ok": False, "error": "invalid_arguments"}
        channel = api.params.get("channel_id") or (str(api.params.get("channels") or "").split(",")[0] or None)
        completed: list[dict[str, Any]] = []
        for spec in specs:
            upload = self.files.get(str(spec.get("id")))
            if upload is None or upload.content is None:
                return {"ok": False, "error": "file_not_found"}
            upload.title = spec.get("title") or upload.filename
            upload.channel = channel
            upload.thread_ts = api.params.get("thread_ts")
            upload.initial_comment = api.params.get("initial_comment")
            upload.completed = True
            completed.append(self._file_object(upload))
        return {"ok": True, "files": completed}

    def _file_object(self, upload: UploadedFile) -> dict[str, Any]:
        url = f"{self.url}/files/{upload.id}/{upload.filename}"
        return {
            "id": upload.id,
            "created": 1700000000,
            "timestamp": 1700000000,
            "name": upload.filename,
            "title": upload.title,
            "mimetype": "application/octet-stream",
            "filetype": upload.filename.rsplit(".", 1)[-1] if "." in upload.filename else "binary",
            "user": self.bot_user_id,
            "size": len(upload.content or b""),
            "url_private": url,
            "permalink": url,
            "channels": [upload.channel] if upload.channel else [],
        }

    # ---- agent surfaces: status, title, suggested prompts, streams ---------

    def _set_status(self, api: _Api) -> ApiResult:
        params = api.params
        if not params.get("channel_id") or not params.get("thread_ts") or "status" not in params:
            return {"ok": False, "error": "invalid_arguments"}
        loading = params.get("loading_messages")
        if loading is not None and (not isinstance(loading, list) or len(loading) > MAX_LOADING_MESSAGES):
            return {"ok": False, "error": "invalid_arguments", "detail": "at most 10 loading_messages"}
        key = (str(params["channel_id"]), str(params["thread_ts"]))
        if params.get("status"):
            self.statuses[key] = {"status": params["status"], "loading_messages": loading or []}
        else:
            self.statuses.pop(key, None)  # an empty status clears the line
        return {"ok": True}

    def _set_title(self, api: _Api) -> ApiResult:
        if not api.params.get("channel_id") or not api.params.get("thread_ts") or not api.params.get("title"):
            return {"ok": False, "error": "invalid_arguments"}
        return {"ok": True}

    def _set_suggested_prompts(self, api: _Api) -> ApiResult:
        prompts = api.params.get("prompts")
        if not api.params.get("channel_id") or not isinstance(prompts, list) or not prompts:
            return {"ok": False, "error": "invalid_arguments"}
        if len(prompts) > MAX_PROMPTS:
            return {"ok": False, "error": "invalid_arguments", "detail": "at most 4 prompts"}
        if not all(isinstance(p, dict) and p.get("title") and p.get("message") for p in prompts):
            return {"ok": False, "error": "invalid_arguments", "detail": "each prompt needs title and message"}
        return {"ok": True}

    def _session_status(self, api: _Api) -> ApiResult:
        """agents.sessions.setStatus: creates the thread's session if needed (with `title`), sets its status."""
        params = api.params
        if self.sessions_refused:
            return {"ok": False, "error": self.sessions_refused}
        if not params.get("channel_id") or not params.get("thread_ts") or params.get("status") not in SESSION_STATUSES:
            detail = "status must be one of " + ", ".join(sorted(SESSION_STATUSES))
            return {"ok": False, "error": "invalid_arguments", "detail": detail}
        key = (str(params["channel_id"]), str(params["thread_ts"]))
        session = self.sessions.setdefault(key, {"title": params.get("title")})
        session["status"] = params["status"]
        return {"ok": True}

    def _session_rename(self, api: _Api) -> ApiResult:
        params = api.params
        if self.sessions_refused:
            return {"ok": False, "error": self.sessions_refused}
        if not params.get("channel_id") or not params.get("thread_ts") or not params.get("title"):
            return {"ok": False, "error": "invalid_arguments"}
        self.sessions.setdefault((str(params["channel_id"]), str(params["thread_ts"])), {})["title"] = params["title"]
        return {"ok": True}

    def _stream_text(self, params: dict[str, Any]) -> str | ApiResult:
        """The markdown a start/append/stop call adds, or the error its chunks deserve."""
        text = str(params.get("markdown_text") or "")
        chunks = params.get("chunks")
        if chunks is not None:
            if not isinstance(chunks, list) or not all(isinstance(c, dict) and c.get("type") in CHUNK_TYPES for c in chunks):
                return {"ok": False, "error": "invalid_chunks"}
            text += "".join(str(c.get("text") or "") for c in chunks if c["type"] == "markdown_text")
        if len(text) > TEXT_LIMIT:
            return {"ok": False, "error": "msg_too_long"}
        return text

    def _start_stream(self, api: _Api) -> ApiResult:
        params = api.params
        channel = str(params.get("channel") or "")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if not params.get("thread_ts"):
            return {"ok": False, "error": "invalid_arguments", "detail": "streamed messages are thread replies"}
        if not channel.startswith("D"):  # outside a DM Slack needs to know who is watching
            if not params.get("recipient_user_id"):
                return {"ok": False, "error": "missing_recipient_user_id"}
            if not params.get("recipient_team_id"):
                return {"ok": False, "error": "missing_recipient_team_id"}
        text = self._stream_text(params)
        if isinstance(text, dict):
            return text
        ts = self._next_ts()
        message = self._bot_message({"thread_ts": params["thread_ts"], "text": text}, ts)
        self.messages[(channel, ts)] = message
        self.streams[(channel, ts)] = "streaming"
        self.statuses.pop((channel, str(params["thread_ts"])), None)
        return {"ok": True, "channel": channel, "ts": ts}

    def _streaming(self, params: dict[str, Any]) -> tuple[dict[str, Any] | None, ApiResult | None]:
        channel, ts = str(params.get("channel") or ""), str(params.get("ts") or "")
        if not channel or not ts:
            return None, {"ok": False, "error": "invalid_arguments"}
        message = self.messages.get((channel, ts))
        if message is None:
            return None, {"ok": False, "error": "message_not_found"}
        state = self.streams.get((channel, ts))
        if state == "stopped_by_user":
            return None, {"ok": False, "error": "stopped_by_user"}
        if state != "streaming":
            return None, {"ok": False, "error": "message_not_in_streaming_state"}
        return message, None

    def _stream_piece(self, params: dict[str, Any]) -> tuple[dict[str, Any], str] | ApiResult:
        """The message being streamed and the text this call adds, or Slack's refusal."""
        message, error = self._streaming(params)
        if error is not None:
            return error
        assert message is not None
        text = self._stream_text(params)
        return text if isinstance(text, dict) else (message, text)

    def _append_stream(self, api: _Api) -> ApiResult:
        piece = self._stream_piece(api.params)
        if isinstance(piece, dict):
            return piece
        message, text = piece
        if not text and not api.params.get("chunks"):
            return {"ok": False, "error": "invalid_arguments", "detail": "markdown_text or chunks required"}
        if len(str(message.get("text") or "")) + len(text) > STREAMED_MESSAGE_LIMIT:
            return {"ok": False, "error": "msg_too_long"}
        message["text"] = str(message.get("text") or "") + text
        return {"ok": True, "channel": api.params["channel"], "ts": api.params["ts"]}

    def _stop_stream(self, api: _Api) -> ApiResult:
        piece = self._stream_piece(api.params)
        if isinstance(piece, dict):
            return piece
        message, text = piece
        blocks = api.params.get("blocks")
        if blocks is not None and (not isinstance(blocks, list) or len(blocks) > MAX_BLOCKS):
            return {"ok": False, "error": "invalid_blocks"}
        if len(str(message.get("text") or "")) + len(text) > STREAMED_MESSAGE_LIMIT:
            return {"ok": False, "error": "msg_too_long"}
        message["text"] = str(message.get("text") or "") + text
        if blocks:
            message["blocks"] = blocks
        channel, ts = str(api.params["channel"]), str(api.params["ts"])
        self.streams[(channel, ts)] = "done"
        session = self.sessions.get((channel, str(message.get("thread_ts"))))
        if session is not None:  # as Slack does: a finished stream sets its thread's session (default active)
            session["status"] = api.params.get("session_status") or "active"
        self._pending_records.append(SlackCall(STREAMED, {"channel": channel, **message}))
        return {"ok": True, "channel": channel, "ts": ts, "message": message}


async def _read_params(request: web.Request) -> dict[str, Any]:
    """Merge query string and body (JSON, form or multipart) like Slack does."""
    params: dict[str, Any] = dict(request.query)
    if request.can_read_body:
        if request.content_type == "application/json":
            try:
                body = await request.json()
            except ValueError:
                body = {}
            if isinstance(body, dict):
                params.update(body)
        elif request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            form = await request.post()
            for key, value in form.items():
                if isinstance(value, web.FileField):
                    params[key] = {"filename": value.filename, "content": value.file.read()}
                else:
                    params[key] = value
    for key in _JSON_FIELDS & params.keys():
        value = params[key]
        if isinstance(value, str) and value[:1] in ("[", "{"):
            try:
                params[key] = json.loads(value)
            except ValueError:
                pass
    return params


def _bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if not header.lower().startswith("bearer "):
        return None
    return header[len("bearer ") :].strip() or None


def _pop_str(params: dict[str, Any], key: str) -> str | None:
    value = params.pop(key, None)
    return str(value) if value else None
