"""Malformed model answers (`"message": null` and friends) are retried, then fail the run cleanly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from crewagent.core.base.events import RunPhase
from tests.support.scripts import engine_harness, script_create_story

NULL_MESSAGE: dict[str, Any] = {
    "id": "x", "object": "chat.completion", "created": 0, "model": "m",
    "choices": [{"index": 0, "message": None, "finish_reason": "stop"}],
}
MALFORMED: list[Any] = [
    NULL_MESSAGE,
    {**NULL_MESSAGE, "choices": [{"index": 0, "finish_reason": "stop"}]},
    {**NULL_MESSAGE, "choices": [{"index": 0, "message": {"content": 5, "role": 7}}]},
    {**NULL_MESSAGE, "choices": ["text"]},
    {**NULL_MESSAGE, "choices": []},
]


@pytest.mark.parametrize("answer", MALFORMED, ids=["null", "missing", "wrong-types", "string-choice", "no-choices"])
async def test_a_malformed_answer_is_retried_and_the_run_goes_on(project: Path, answer: Any) -> None:
    async with engine_harness(project, max_retries=1) as h:
        h.llm.add_error(200, body=answer)
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        result = await h.engine.pump(h.create(package, agent="sm"), package, intent="start", on_event=h.record_event)
        assert result.phase is RunPhase.WAITING_USER and result.error is None
        assert [e.attempt for e in h.kinds("llm_retrying")] == [1]
        assert "malformed answer" in h.kinds("llm_retrying")[0].reason


async def test_malformed_answers_every_time_fail_the_run_cleanly(project: Path) -> None:
    async with engine_harness(project, max_retries=2) as h:
        for _ in range(3):
            h.llm.add_error(200, body=NULL_MESSAGE)
        script_create_story(h.llm)
        package = h.load("create-story-micro")
        record = h.create(package, agent="sm")
        failed = await h.engine.pump(record, package, intent="start", on_event=h.record_event)
        assert failed.phase is RunPhase.FAILED
        assert failed.error is not None and failed.error.code == "LLM_BAD_RESPONSE"
        assert "malformed answer" in failed.error.message and "127.0.0.1" not in failed.error.message
        assert h.runs.get(record.run_id).phase is RunPhase.FAILED
        assert len(h.llm.requests) == 3

        again = await h.engine.pump(h.runs.get(record.run_id), package, intent="continue")
        assert again.phase is RunPhase.WAITING_USER
