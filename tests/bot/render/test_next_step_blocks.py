"""The next-step buttons and the cycle line, built from a run snapshot (no Slack I/O)."""

from __future__ import annotations

from crewagent.bot.base.actions import ButtonValue
from crewagent.bot.render.next_step_blocks import LABEL_LIMIT, cycle_line, next_step_blocks
from crewagent.core.api.events import RunPhase
from crewagent.core.api.runs import RunSnapshot
from crewagent.core.store.runs_model import OfferedStep

KEY = "T1:C1:1700000000.000100"


def snapshot(phase: RunPhase = RunPhase.COMPLETED, **kw: object) -> RunSnapshot:
    base: dict[str, object] = dict(
        run_id="r1", workflow_id="code-review", workflow_name="Code Review", phase=phase, agent_id="dev",
        agent_name="Amelia (Developer)", steps_done=3, steps_total=3,
        next_steps=[OfferedStep(workflow_id="dev-story", label="Dev Story", agent_name="Amelia (Developer)", back=True),
                    OfferedStep(workflow_id="create-story", label="Create Story " + "x" * 80, agent_name="Bob")],
    )
    return RunSnapshot(**{**base, **kw})  # type: ignore[arg-type]


def test_a_completed_run_offers_its_next_steps_as_signed_buttons() -> None:
    actions = [b for b in next_step_blocks(snapshot(), key=KEY) if b["type"] == "actions"]
    buttons = actions[0]["elements"]
    assert buttons[0]["text"]["text"] == "Back to Dev Story · Amelia (Developer)" and "style" not in buttons[0]
    assert len(buttons[1]["text"]["text"]) == LABEL_LIMIT and buttons[1]["text"]["text"].endswith("…")
    assert [b["action_id"] for b in buttons] == ["crew:next:0", "crew:next:1"]
    assert ButtonValue.decode(buttons[0]["value"]) == ButtonValue(s=KEY, r="r1", x="dev-story")


def test_nothing_is_offered_before_completion_or_without_next_steps() -> None:
    assert next_step_blocks(snapshot(RunPhase.WAITING_USER), key=KEY) == []
    assert next_step_blocks(snapshot(next_steps=[]), key=KEY) == []


def test_the_cycle_line_names_the_steps_so_far() -> None:
    assert cycle_line(snapshot(cycle=[])) is None
    line = cycle_line(snapshot(RunPhase.RUNNING, cycle=["Create Story", "Dev Story"]))
    assert line == "Cycle so far: Create Story ✓ → Dev Story ✓ → *Code Review*"
