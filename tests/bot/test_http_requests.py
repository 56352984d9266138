"""The HTTP front door: signed requests only, URL verification and the health check."""

from __future__ import annotations

import time
from pathlib import Path

from tests.support.bot_harness import SECRET, bot_harness
from tests.support.fakes.slack_events import (
    app_mention_event,
    block_actions_payload,
    deliver_event,
    deliver_interaction,
    url_verification_body,
)


async def test_http_rejects_unsigned_expired_and_forged_requests(project: Path) -> None:
    async with bot_harness(project) as h:
        envelope = app_mention_event("<@UBOT> hi")
        status, _ = await deliver_event(h.http, h.url, SECRET, envelope, signed=False)
        assert status == 401
        status, _ = await deliver_event(h.http, h.url, SECRET, envelope, timestamp=int(time.time()) - 6 * 60)
        assert status == 401
        status, _ = await deliver_event(h.http, h.url, "wrong-secret", envelope)
        assert status == 401
        payload = block_actions_payload("crew:control:stop", '{"s":"T1:C1:1.1","r":"x","x":"stop"}')
        status, _ = await deliver_interaction(h.http, h.url, SECRET, payload, signed=False)
        assert status == 401
        await h.settle()
        assert h.slack.calls_to("chat.postMessage") == [] and h.slack.calls_to("chat.postEphemeral") == []


async def test_http_answers_url_verification_and_health(project: Path) -> None:
    async with bot_harness(project) as h:
        status, body = await deliver_event(h.http, h.url, SECRET, url_verification_body("abc"))
        assert status == 200 and "abc" in body
        async with h.http.get(h.url.replace("/slack/events", "/healthz")) as response:
            assert response.status == 200 and (await response.json())["ok"] is True
