"""A loopback fake of GitHub's REST API, as far as pull requests go: look one up by head, open one.

It keeps the pull requests it was asked to open, answers like GitHub (the 422 "A pull request
already exists" included), checks the token, and can be told to refuse with any status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from ._server import LoopbackServer

TOKEN = "ghp_test-token-never-shown"


@dataclass
class PullRequest:
    number: int
    owner: str
    repo: str
    head: str
    base: str
    title: str
    body: str
    state: str = "open"

    def json(self, api: FakeGitHub) -> dict[str, Any]:
        return {"number": self.number, "state": self.state, "title": self.title, "body": self.body,
                "html_url": f"https://github.example/{self.owner}/{self.repo}/pull/{self.number}",
                "head": {"ref": self.head}, "base": {"ref": self.base}}


@dataclass
class Refusal:
    status: int
    message: str = "refused"


@dataclass
class FakeGitHub(LoopbackServer):
    token: str = TOKEN
    default_branch: str = "main"
    pulls: list[PullRequest] = field(default_factory=list)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (method, path with query)
    authorizations: list[str] = field(default_factory=list)
    refuse: Refusal | None = None  # every request gets this answer
    stale_lookups: int = 0  # this many look-ups answer "none" (another delivery opens it meanwhile)

    def __post_init__(self) -> None:
        super().__init__()

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _build_app(self) -> web.Application:
        app = web.Application(middlewares=[self._gate])
        app.router.add_get("/repos/{owner}/{repo}", self._repository)
        app.router.add_get("/repos/{owner}/{repo}/pulls", self._list)
        app.router.add_post("/repos/{owner}/{repo}/pulls", self._open)
        return app

    @web.middleware
    async def _gate(self, request: web.Request, handler: Any) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        self.authorizations.append(request.headers.get("Authorization", ""))
        if self.refuse is not None:
            return _error(self.refuse.status, self.refuse.message)
        if request.headers.get("Authorization", "") not in (f"token {self.token}", f"Bearer {self.token}"):
            return _error(401, "Bad credentials")
        return await handler(request)

    async def _repository(self, request: web.Request) -> web.Response:
        return web.json_response({"default_branch": self.default_branch, "full_name": _full(request)})

    async def _list(self, request: web.Request) -> web.Response:
        if self.stale_lookups > 0:
            self.stale_lookups -= 1
            return web.json_response([])
        head = request.query.get("head", "")
        state = request.query.get("state", "open")
        found = [p.json(self) for p in self.pulls if _full(request) == f"{p.owner}/{p.repo}"
                 and (not head or head == f"{p.owner}:{p.head}") and (state == "all" or p.state == state)]
        return web.json_response(found)

    async def _open(self, request: web.Request) -> web.Response:
        data = await request.json()
        owner, repo = request.match_info["owner"], request.match_info["repo"]
        if any(p.head == data.get("head") and p.state == "open" and p.repo == repo for p in self.pulls):
            return web.json_response({"message": "Validation Failed", "errors": [
                {"resource": "PullRequest", "code": "custom",
                 "message": f"A pull request already exists for {owner}:{data.get('head')}."}]}, status=422)
        pull = PullRequest(number=len(self.pulls) + 1, owner=owner, repo=repo, head=str(data["head"]),
                           base=str(data["base"]), title=str(data["title"]), body=str(data.get("body") or ""))
        self.pulls.append(pull)
        return web.json_response(pull.json(self), status=201)


def _full(request: web.Request) -> str:
    return f"{request.match_info['owner']}/{request.match_info['repo']}"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"message": message, "documentation_url": "https://docs.github.com/rest"}, status=status)
