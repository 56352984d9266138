"""Pull requests through a fake GitHub REST API on loopback: one per branch, refusals said in words."""

from __future__ import annotations

import logging

import pytest

from crewagent.core.checkout.pull_requests import ForgeSettings, PullRequestAsk, open_pull_request
from tests.support.fakes.github_api import TOKEN, FakeGitHub, Refusal

ENV = {"FORGE_TOKEN": TOKEN}


def ask(branch: str = "crewagent/dev-story-1234abcd", base: str | None = "main") -> PullRequestAsk:
    return PullRequestAsk(remote_url="git@github.com:team/app.git", head=branch, base=base,
                          title="Dev Story: results of run 1234abcd", body="Files the run wrote")


def forge(api: FakeGitHub, **changes: object) -> ForgeSettings:
    return ForgeSettings.model_validate({"api_url": api.api_url, "token": "${FORGE_TOKEN}", **changes})


async def test_two_deliveries_of_a_branch_leave_one_pull_request() -> None:
    async with FakeGitHub() as api:
        first = await open_pull_request(forge(api), ask(), ENV)
        second = await open_pull_request(forge(api), ask(), ENV)
        other = await open_pull_request(forge(api), ask("crewagent/code-review-99"), ENV)
    assert first.ok and first.created and first.url and first.url.endswith("/team/app/pull/1")
    assert second.ok and not second.created and second.url == first.url
    assert other.number == 2
    assert [(p.head, p.base) for p in api.pulls] == [("crewagent/dev-story-1234abcd", "main"),
                                                     ("crewagent/code-review-99", "main")]
    assert [m for m, _ in api.requests].count("POST") == 2
    assert all(a == f"token {TOKEN}" for a in api.authorizations)


async def test_base_defaults_to_the_repository_default_branch() -> None:
    async with FakeGitHub(default_branch="trunk") as api:
        made = await open_pull_request(forge(api), ask(base=None), ENV)
    assert made.ok and api.pulls[0].base == "trunk"


async def test_an_already_open_pull_request_found_after_a_422() -> None:
    """Another delivery opened it between our look-up and our request: GitHub's 422 resolves to that one."""
    async with FakeGitHub() as api:
        first = await open_pull_request(forge(api), ask(), ENV)
        api.stale_lookups = 1
        again = await open_pull_request(forge(api), ask(), ENV)
    assert again.ok and again.url == first.url and len(api.pulls) == 1
    assert [m for m, _ in api.requests].count("POST") == 2  # the second one was answered 422


@pytest.mark.parametrize(
    ("status", "words"),
    [(401, "token was not accepted"), (403, "may not open pull requests on team/app"),
     (422, "Validation Failed"), (500, "failed on its side")],
)
async def test_a_refusal_is_a_sentence_and_never_shows_the_token(
    status: int, words: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with FakeGitHub(refuse=Refusal(status, "Validation Failed")) as api:
        result = await open_pull_request(forge(api), ask(), ENV)
    assert not result.ok and words in result.message and "branch is pushed" in result.message
    assert TOKEN not in result.message and TOKEN not in caplog.text and str(api.port) not in result.message


async def test_a_wrong_token_is_refused_by_the_forge() -> None:
    async with FakeGitHub() as api:
        result = await open_pull_request(forge(api), ask(), {"FORGE_TOKEN": "wrong"})
    assert "token was not accepted" in result.message and not api.pulls


async def test_an_unreachable_forge_is_a_sentence() -> None:
    async with FakeGitHub() as api:
        settings = forge(api)
    result = await open_pull_request(settings, ask(), ENV)  # the server is gone: connection refused
    assert not result.ok and "could not be reached" in result.message


async def test_a_remote_that_is_not_on_github_opens_nothing() -> None:
    settings = ForgeSettings(token="${FORGE_TOKEN}")
    result = await open_pull_request(settings, PullRequestAsk("file:///srv/app.git", "b", "main", "t", "b"), ENV)
    assert not result.ok and "not a github repository" in result.message


def test_the_token_must_come_from_the_environment() -> None:
    with pytest.raises(ValueError, match=r"\$\{VAR\}"):
        ForgeSettings(token="ghp_literal")
    assert ForgeSettings(token="${FORGE_TOKEN}").problems({}) == ["token: ${FORGE_TOKEN} is not set in the environment"]
