"""A running shell_run command in Slack: its plan line, the status line, and the message it ends with."""

from __future__ import annotations

import json

from crewagent.bot.base.actions import ButtonValue
from crewagent.bot.render import command_card
from crewagent.bot.render.plan import PlanBook
from crewagent.core.api.events import engine_events

KEY = "T1:C1:1700000000.000100"


def _event(**fields: object) -> engine_events.CommandProgress:
    base: dict[str, object] = {"run_id": "run-1", "call_id": "abc", "command": "python -m pytest -q"}
    return engine_events.CommandProgress.model_validate({**base, **fields})


def test_a_running_command_updates_one_plan_line_and_the_status_line() -> None:
    plans = PlanBook()
    plans.note("run-1", "step-01", "Reading the project")
    for ms in (0, 3_000, 6_200):
        event = _event(elapsed_ms=ms, last_line="tests/test_calc.py .F")
        plans.note("run-1", "step-01", command_card.plan_line(event), replacing=command_card.plan_key(event))
    ended = _event(running=False, elapsed_ms=7_400, exit_code=1, tail="1 failed")
    plans.note("run-1", "step-01", command_card.plan_line(ended), replacing=command_card.plan_key(ended))
    assert plans.details("run-1")["step-01"] == ["Reading the project", "$ python -m pytest -q · exit 1 · 7.4 s"]
    line = command_card.status_line(_event(elapsed_ms=12_000, last_line="collected 40 items"))
    assert line == "Running `python -m pytest -q` · 12 s · collected 40 items"


def test_the_end_message_shows_exit_code_duration_last_lines_and_show_output() -> None:
    tail = "\n".join(f"line {n}" for n in range(15)) + "\n```sneaky fence```"
    message = command_card.result_message(
        _event(running=False, elapsed_ms=3_250, exit_code=0, tail=tail, log="@state/logs/commands/20260101T000000-0123abcd.log"),
        key=KEY,
    )
    payload = message.payload()
    text = json.dumps(payload, ensure_ascii=False)
    assert ":white_check_mark:" in text and "exit 0 · 3.2 s" in text
    code = payload["blocks"][1]["text"]["text"]
    assert code.startswith("```\n") and code.endswith("\n```") and "line 14" in code
    assert code.count("```") == 2  # the output cannot close the code block early
    [show] = payload["blocks"][2]["elements"]
    assert show["text"]["text"] == "Show output"
    value = ButtonValue.decode(show["value"])
    assert value is not None and value.f == "@state/logs/commands/20260101T000000-0123abcd.log" and value.r == "run-1"


def test_a_timed_out_command_says_so() -> None:
    message = command_card.result_message(_event(running=False, elapsed_ms=600_000, killed="timeout"), key=KEY)
    text = json.dumps(message.payload(), ensure_ascii=False)
    assert ":x:" in text and "stopped at its time limit after 600 s" in text and "(no output)" in text
