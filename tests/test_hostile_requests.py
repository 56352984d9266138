"""Forged and malformed signed requests get a 401, never a 500 or a traceback."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.fakes.slack_events import app_mention_event, block_actions_payload, deliver_event, deliver_interaction
from tests.test_bot_support import SECRET, bot_harness


@pytest.mark.parametrize("timestamp", ["soon", "", "1e9", "-", "١٢٣", "9" * 400, " 12"])
async def test_a_malformed_timestamp_is_a_401(project: Path, timestamp: str, caplog: pytest.LogCaptureFixture) -> None:
    async with bot_harness(project) as h:
        with caplog.at_level(logging.ERROR):
            status, body = await deliver_event(h.http, h.url, SECRET, app_mention_event("<@UBOT> hi"), timestamp=timestamp)
            assert status == 401 and "Traceback" not in body
            payload = block_actions_payload("crew:control:stop", '{"s":"T1:C1:1.1","r":"x","x":"stop"}')
            status, body = await deliver_interaction(h.http, h.url, SECRET, payload, timestamp=timestamp)
            assert status == 401 and "Traceback" not in body
        await h.settle()
        assert [r for r in caplog.records if r.exc_info] == []
        assert h.slack.calls_to("chat.postMessage") == [] and h.slack.calls_to("chat.postEphemeral") == []
