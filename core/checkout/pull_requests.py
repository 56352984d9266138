"""Pull requests: after a run's branch is pushed, one pull request for it on the team's forge.

`forge:` in crewagent.yml names the forge's REST API and the environment variable holding its
token. The owner and repository come from the project's remote URL; the head is the run's branch
and the base the project's default branch. An open pull request for the branch is looked up
first, so delivering the same branch again (its later steps, new changes) leaves one pull request.
Anything the forge refuses, or not reaching it, is a sentence for the person who asked; the
pushed branch stays as it is. The token is a secret: it is never logged or shown.

GitHub is spoken through gidgethub (its sansio layer knows the headers, rate limits and error
shapes), on the aiohttp the service already uses; it is imported on the first pull request, so a
bot without `forge:` never loads it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

from typing import TYPE_CHECKING

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, field_validator

from .urls import remote_repo

if TYPE_CHECKING:
    from gidgethub import HTTPException
    from gidgethub.aiohttp import GitHubAPI

log = logging.getLogger(__name__)

_TOKEN_VAR = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")
REQUESTER = "CrewAgent"  # GitHub asks every client to name itself in User-Agent


class ForgeSettings(BaseModel):
    """Where pull requests are opened after Commit & push (GitHub's REST API, or GitHub Enterprise's)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    kind: Literal["github"] = "github"
    """The forge's kind; `github` (github.com or GitHub Enterprise Server)."""
    api_url: str = "https://api.github.com"
    """The REST API's address (GitHub Enterprise Server: `https://HOST/api/v3`)."""
    token: str
    """`${VAR}`: the environment variable holding a token that may open pull requests (never the token itself)."""
    timeout_seconds: float = Field(default=30.0, gt=0)
    """Seconds the pull-request calls may take together."""

    @field_validator("token")
    @classmethod
    def _from_environment(cls, value: str) -> str:
        if not _TOKEN_VAR.match(value.strip()):
            raise ValueError("write the token as ${VAR}, the environment variable that holds it")
        return value.strip()

    @field_validator("api_url")
    @classmethod
    def _web_address(cls, value: str) -> str:
        if urlsplit(value).scheme not in ("http", "https"):
            raise ValueError("api_url must start with http:// or https://")
        return value.rstrip("/")

    @property
    def token_variable(self) -> str:
        match = _TOKEN_VAR.match(self.token)
        assert match is not None  # checked when the settings were read
        return match.group(1)

    def problems(self, environ: Mapping[str, str]) -> list[str]:
        """What is missing to open pull requests (the variable's value is never shown)."""
        if environ.get(self.token_variable, "").strip():
            return []
        return [f"token: ${{{self.token_variable}}} is not set in the environment"]


@dataclass(frozen=True)
class PullRequestResult:
    url: str | None = None  # the pull request's web page
    number: int | None = None
    created: bool = False  # False: an open pull request for the branch was already there
    message: str = ""  # for the person, when no pull request could be opened or found

    @property
    def ok(self) -> bool:
        return self.url is not None


@dataclass(frozen=True)
class PullRequestAsk:
    """What the pull request should be: the run's branch into the project's default branch."""

    remote_url: str
    head: str
    base: str | None  # None: the repository's default branch on the forge
    title: str
    body: str


async def open_pull_request(
    settings: ForgeSettings, ask: PullRequestAsk, environ: Mapping[str, str] | None = None
) -> PullRequestResult:
    """The branch's open pull request, opened now if there was none; never raises."""
    found = remote_repo(ask.remote_url)
    parts = urlsplit(found.web).path.strip("/").split("/") if found and found.forge == settings.kind else []
    if len(parts) != 2:
        return PullRequestResult(message=(
            f"The branch is pushed, but no pull request was opened: the project's remote is not a {settings.kind} "
            "repository the bot recognises. Open the pull request on the forge yourself."
        ))
    from gidgethub import HTTPException
    from gidgethub.aiohttp import GitHubAPI

    owner, repo = parts
    token = (os.environ if environ is None else environ).get(settings.token_variable, "").strip()
    try:
        async with asyncio.timeout(settings.timeout_seconds):
            async with aiohttp.ClientSession() as session:
                api = GitHubAPI(session, REQUESTER, oauth_token=token or None, base_url=settings.api_url)
                return await _find_or_open(api, owner, repo, ask)
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        log.warning("forge unreachable", extra={"repo": f"{owner}/{repo}", "error": type(exc).__name__})
        return PullRequestResult(message=(
            f"The branch is pushed, but {_name(settings)} could not be reached to open its pull request. "
            "Deliver again in a moment to try once more, or open it on the forge yourself."
        ))
    except HTTPException as exc:
        log.warning("forge refused", extra={"repo": f"{owner}/{repo}", "status": int(exc.status_code)})
        return PullRequestResult(message=_refusal(settings, exc, f"{owner}/{repo}"))


async def _find_or_open(api: GitHubAPI, owner: str, repo: str, ask: PullRequestAsk) -> PullRequestResult:
    existing = await _open_for(api, owner, repo, ask.head)
    if existing is not None:
        return existing
    base = ask.base or str((await api.getitem("/repos/{owner}/{repo}", {"owner": owner, "repo": repo}))["default_branch"])
    data = {"title": ask.title, "head": ask.head, "base": base, "body": ask.body}
    from gidgethub import BadRequest

    try:
        made: Any = await api.post("/repos/{owner}/{repo}/pulls", {"owner": owner, "repo": repo}, data=data)
    except BadRequest as exc:  # two deliveries racing: the other one opened it
        if int(exc.status_code) == 422 and "already exists" in str(exc).lower():
            again = await _open_for(api, owner, repo, ask.head)
            if again is not None:
                return again
        raise
    log.info("pull request opened", extra={"repo": f"{owner}/{repo}", "number": made.get("number")})
    return PullRequestResult(url=str(made["html_url"]), number=int(made["number"]), created=True)


async def _open_for(api: GitHubAPI, owner: str, repo: str, branch: str) -> PullRequestResult | None:
    found: Any = await api.getitem(
        "/repos/{owner}/{repo}/pulls{?head,state}", {"owner": owner, "repo": repo, "head": f"{owner}:{branch}",
                                                     "state": "open"},
    )
    if isinstance(found, list) and found:
        return PullRequestResult(url=str(found[0]["html_url"]), number=int(found[0]["number"]))
    return None


def _name(settings: ForgeSettings) -> str:
    return "GitHub" if urlsplit(settings.api_url).hostname == "api.github.com" else "the GitHub server"


def _refusal(settings: ForgeSettings, exc: HTTPException, repo: str) -> str:
    from gidgethub import GitHubBroken, RateLimitExceeded

    status, who = int(exc.status_code), _name(settings)
    lead = f"The branch is pushed, but {who} refused to open its pull request"
    if isinstance(exc, RateLimitExceeded):
        return f"{lead}: the bot has made too many requests. Deliver again later, or open it on the forge yourself."
    if status == 401:
        return f"{lead}: the bot's token was not accepted. Ask an admin to renew the forge token, then deliver again."
    if status in (403, 404):
        return (f"{lead}: the bot's token may not open pull requests on {repo} (or cannot see it). Ask an admin "
                "to give the token access to the repository, then deliver again.")
    if status == 422:
        return f"{lead}: {_said(exc)}. Open it on the forge yourself, or change the branch and deliver again."
    if isinstance(exc, GitHubBroken):
        return f"{lead}: it failed on its side. Deliver again in a moment, or open it on the forge yourself."
    return f"{lead} (HTTP {status}). Deliver again in a moment, or open it on the forge yourself."


def _said(exc: HTTPException) -> str:
    """The forge's own reason for a 422, in one line (it names branches and fields, never the token)."""
    text = " ".join(str(exc).split())[:200].rstrip(".")
    return text or "it did not accept the request"
