"""The Home tab: each person sees their own runs (admins may switch to all), refreshed when a run changes phase.

Driven through the real Bolt app: signed HTTP deliveries or the local Socket Mode server, the fake
Slack Web API (which keeps the Home view each user sees), and the scripted model.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from crewagent.bot.config import Access
from crewagent.bot.home.overview import Overview, RunLine
from crewagent.bot.home.tab import MESSAGE_BLOCKS, VIEW_BLOCKS, AgentEntry, HomeContext, home_view, overview_blocks
from crewagent.bot.base.thread import ThreadKey
from crewagent.core.base.events import RunPhase
from tests.support.scripts import hello_branch_responder
from tests.support.bot_harness import Harness, Mode, bot_harness, element_text, message_text

ALICE, BOB, ADMIN = "UALICE", "UBOB", "UADMIN"


def view_text(view: dict[str, Any]) -> str:
    return message_text({"blocks": view.get("blocks") or []})


def buttons(view: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for block in view.get("blocks") or []:
        if isinstance(block.get("accessory"), dict):
            found.append(block["accessory"])
        found += [e for e in block.get("elements") or [] if isinstance(e, dict) and e.get("type") == "button"]
    return found


async def waiting_run(h: Harness, user: str, channel: str = "C1") -> str:
    """`user` starts hello-branch, which asks greenfield or brownfield."""
    mark = h.mark()
    top = await h.mention("hello-branch", user=user, channel=channel)
    await h.wait_status(top, "Waiting for your reply", channel=channel)
    await h.settle()
    assert h.mark() > mark
    return top


def quick(h: Harness) -> None:
    assert h.bot is not None and h.bot.home is not None
    h.bot.home.interval = 0.05
    h.bot.home.rate = 200.0
    h.bot.home.retry_delay = 0.05


@pytest.mark.parametrize("mode", ["http", "socket"])
async def test_each_person_sees_only_their_own_runs_and_admins_may_switch_to_all(project: Path, mode: Mode) -> None:
    async with bot_harness(project, ["hello-branch"], mode=mode, access=Access(admins=[ADMIN])) as h:
        quick(h)
        h.llm.responder = hello_branch_responder()
        alice_top = await waiting_run(h, ALICE)
        bob_top = await waiting_run(h, BOB, channel="C2")

        mark = h.mark()
        await h.home_opened(ALICE)
        view = await h.home_view(ALICE, since=mark)
        text = view_text(view)
        assert view["type"] == "home"
        assert "Your runs" in text and "*Waiting for you* (1)" in text
        assert "Hello Branch" in text or "hello-branch" in text.lower()
        assert "<#C1>" in text and "<#C2>" not in text
        assert "greenfield" in text.lower()  # the pending question
        assert "Waiting less than a minute" in text
        links = [b["url"] for b in buttons(view) if b.get("url")]
        assert links == [f"https://team-one.slack.com/archives/C1/p{alice_top.replace('.', '')}"]
        assert "Show all runs" not in text  # alice is no admin
        assert "Agents you can start" in text and "/crew analyst" in text

        mark = h.mark()
        await h.home_opened(BOB)
        bob_view = await h.home_view(BOB, since=mark)
        assert "<#C2>" in view_text(bob_view) and "<#C1>" not in view_text(bob_view)
        assert [b["url"] for b in buttons(bob_view) if b.get("url")][0].endswith(bob_top.replace(".", ""))

        mark = h.mark()
        await h.home_opened(ADMIN)
        admin_view = await h.home_view(ADMIN, since=mark)
        assert "You have no runs yet." in view_text(admin_view) and "How to start a run" in view_text(admin_view)
        switch = next(b for b in buttons(admin_view) if "Show all runs" in element_text(b))
        mark = h.mark()
        payload = _home_click(switch, ADMIN, admin_view)
        await h.interaction(payload)
        everyone = await h.home_view(ADMIN, lambda v: "All runs" in view_text(v), since=mark)
        text = view_text(everyone)
        assert "<#C1>" in text and "<#C2>" in text and f"<@{ALICE}>" in text and f"<@{BOB}>" in text
        assert "Show only my runs" in text

        # Reopening the tab keeps what the admin chose (Slack sends the view they saw).
        mark = h.mark()
        await h.home_opened(ADMIN, view=h.slack.home_views[ADMIN])
        again = await h.home_view(ADMIN, since=mark)
        assert "All runs" in view_text(again)

        # A non-admin pressing a forged switch still sees only their runs.
        mark = h.mark()
        await h.interaction(_home_click({**switch, "value": "all"}, ALICE, view))
        await h.settle()
        assert all("All runs" not in view_text(p["view"]) for p in h.slack.calls_to("views.publish")[-3:]
                   if p["user_id"] == ALICE)


def _home_click(button: dict[str, Any], user: str, view: dict[str, Any]) -> dict[str, Any]:
    """A block_actions payload from the Home tab (container type "view")."""
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": "T1"},
        "api_app_id": "A1",
        "token": "fake-verification-token",
        "container": {"type": "view", "view_id": view.get("id", "V1")},
        "trigger_id": "1.T1.fake",
        "team": {"id": "T1", "domain": "team-one"},
        "is_enterprise_install": False,
        "view": view,
        "actions": [
            {
                "type": "button",
                "action_id": button["action_id"],
                "block_id": "scope",
                "text": button["text"],
                "value": button.get("value", ""),
                "action_ts": "1700000000.000001",
            }
        ],
    }


async def test_the_view_is_refreshed_when_a_run_changes_phase(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        quick(h)
        h.llm.responder = hello_branch_responder()
        top = await waiting_run(h, ALICE)
        await h.home_opened(ALICE)
        await h.home_view(ALICE, lambda v: "*Waiting for you* (1)" in view_text(v))
        await h.settle()

        green, widget = h.button(top, "Greenfield")
        mark = h.mark()
        await h.click(green, widget, user=ALICE)
        done = await h.home_view(ALICE, lambda v: "*Recently completed* (1)" in view_text(v), since=mark)
        text = view_text(done)
        assert "Waiting for you" not in text
        assert re.search(r"\b[1-9]\d* artifacts?\b", text) and re.search(r"[1-9][\d,]* tokens", text), text
        await h.settle()
        refreshes = [p for p in h.slack.calls_to("views.publish")[0:] if p["user_id"] == ALICE]
        assert len(refreshes) <= 4  # coalesced: open, then a few phase changes at most
        assert all(p["user_id"] == ALICE for p in h.slack.calls_to("views.publish"))  # nobody else looked


async def test_a_refused_view_is_sent_smaller_or_later_and_never_shown_as_an_error(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"]) as h:
        quick(h)
        h.llm.responder = hello_branch_responder()
        await waiting_run(h, ALICE)
        h.slack.fail_next("views.publish", "invalid_arguments")
        mark = h.mark()
        await h.home_opened(ALICE)
        await h.settle()
        first, second = h.slack.calls_to("views.publish")  # the refused view, then a smaller one
        assert len(second["view"]["blocks"]) < len(first["view"]["blocks"])
        assert "*Waiting for you* (1)" in view_text(h.slack.home_views[ALICE])

        h.slack.fail_next("views.publish", "ratelimited", times=4)  # more than the SDK's own retries
        del h.slack.home_views[ALICE]
        await h.home_opened(ALICE)
        await h.settle()
        assert len(h.slack.calls_to("views.publish")) == 2 + 5  # refused four times, then published
        assert "*Waiting for you* (1)" in view_text(h.slack.home_views[ALICE])
        assert h.slack.calls_to("chat.postEphemeral") == []
        assert not any("views" in message_text(p) for p in h.slack.calls_to("chat.postMessage"))


async def test_channels_the_bot_may_no_longer_use_never_appear(project: Path) -> None:
    async with bot_harness(project, ["hello-branch"], access=Access(allowed_channels=["C1", "C2"])) as h:
        quick(h)
        h.llm.responder = hello_branch_responder()
        await waiting_run(h, ALICE)
        await waiting_run(h, ALICE, channel="C2")
        h.config.access = Access(allowed_channels=["C1"])
        await h.restart(grace=2.0)
        quick(h)
        mark = h.mark()
        await h.home_opened(ALICE)
        text = view_text(await h.home_view(ALICE, since=mark))
        assert "*Waiting for you* (1)" in text and "<#C1>" in text and "<#C2>" not in text

        payload, _ = await h.command("runs", user=ALICE)
        name = payload["response_url"].rsplit("/", 1)[-1]
        answer = await h.slack.wait_for("response_url", lambda p: p.get("_name") == name)
        assert "<#C2>" not in message_text(answer) and "<#C1>" in message_text(answer)


def _line(n: int, phase: RunPhase, *, paused: bool = False) -> RunLine:
    return RunLine(
        run_id=f"run-{n:04d}", key=ThreadKey("T1", "C1", f"1700000000.{n:06d}"), owner=ALICE,
        workflow="Hello Branch", agent="Mary", phase=phase, paused=paused,
        since=datetime(2026, 1, 1, tzinfo=timezone.utc), steps_done=2, steps_total=5, step="Decide",
        question="Greenfield or brownfield? " * 30, artifacts=3, tokens=12_000,
        branch="crewagent/hello-branch-0001", pull_request_url="https://github.com/acme/app/pull/new/x",
    )


def test_a_long_list_stays_within_slacks_block_limits_and_says_how_many_more() -> None:
    overview = Overview(
        waiting=[_line(n, RunPhase.WAITING_USER) for n in range(60)],
        active=[_line(n, RunPhase.RUNNING) for n in range(60, 120)],
        done=[_line(n, RunPhase.COMPLETED) for n in range(120, 125)],
        more_waiting=140, more_active=40, more_done=195, runs_total=500, tokens_this_week=1_234_567,
    )
    agents = [AgentEntry(f"a{n}", f"Agent {n}", "Helper", "🤖", ("do-it",)) for n in range(40)]
    now = datetime(2026, 1, 2, tzinfo=timezone.utc)
    view = home_view(overview, agents, HomeContext(user=ALICE, now=now)).to_dict()  # slack_sdk validates it
    text = view_text(view)
    assert len(view["blocks"]) <= VIEW_BLOCKS
    assert "*Waiting for you* (200)" in text and "*Running and paused* (100)" in text
    assert re.search(r"and \d+ more", text)
    shown = text.count("Open thread")
    hidden = sum(int(n) for n in re.findall(r"and (\d+) more", text))
    assert shown + hidden == 500 - 0  # every run is either shown or counted
    assert "Waiting 24 hours" in text and "Agents you can start" in text
    assert "1,234,567" in text

    message = overview_blocks(overview, [], HomeContext(user=ALICE, now=now), max_blocks=MESSAGE_BLOCKS, switch=False)
    assert len(message) <= MESSAGE_BLOCKS
    assert all(len(b.to_dict().get("text", {}).get("text", "")) <= 3000 for b in message)
