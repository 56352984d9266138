"""Answers to open questions as typed values: what a surface may build, what fits the question asked,
and the one text the model reads."""

from __future__ import annotations

import pytest

from crewagent.core.base.answers import (
    ApprovalAnswer,
    ConfirmationAnswer,
    Confirmed,
    SelectionAnswer,
    answer_of,
    checked_answer,
    confirms_state_change,
    form_answer,
    misfit,
)
from crewagent.core.base.errors import CrewError
from crewagent.core.base.wrappers import widget_submit_text, wrap_user_input

PICK = {"widgetId": "pick", "type": "selection", "message": "Which?", "multi": False,
        "options": [{"value": "a", "label": "A"}, {"value": "b", "label": "B"}]}
FORM = {"widgetId": "details", "type": "form", "message": "Details", "schema": {
    "type": "object", "required": ["name"],
    "properties": {"name": {"type": "string"}, "size": {"type": "integer", "minimum": 1}}}}


def test_the_model_reads_an_answer_as_the_spec_writes_it() -> None:
    answer = answer_of(PICK, ["b"])
    assert answer == SelectionAnswer(widget_id="pick", value=["b"])
    assert widget_submit_text(answer) == 'WIDGET_SUBMIT\n{"widgetId": "pick", "type": "selection", "value": ["b"]}'
    assert wrap_user_input(answer, "step-1") == (
        'USER_INPUT\n- forNodeId: step-1\nWIDGET_SUBMIT\n{"widgetId": "pick", "type": "selection", "value": ["b"]}'
    )
    review = form_answer("plan", "plan_review", {"decision": "approve"})
    assert widget_submit_text(review).endswith('"value": {"decision": "approve"}}')


def test_an_approval_in_the_older_shape_is_read_as_a_decision() -> None:
    answer = form_answer("approval-1", "tool_approval", {"approved": False, "by": "U1"})
    assert isinstance(answer, ApprovalAnswer) and answer.value.decision == "deny" and answer.value.by == "U1"


@pytest.mark.parametrize(("kind", "value", "said"), [
    ("selection", "a", "value: Input should be a valid list"),
    ("confirmation", {"yes": True}, "value.confirmed: Field required"),
    ("tool_approval", {"decision": "maybe", "by": "U1"}, "value.decision: Input should be"),
    ("plan_review", {"decision": "approve", "extra": 1}, "value.extra: Extra inputs are not permitted"),
    ("poll", ["a"], "questions of type 'poll' are not answered this way"),
])
def test_a_malformed_answer_is_refused_with_what_is_wrong(kind: str, value: object, said: str) -> None:
    with pytest.raises(CrewError) as raised:
        form_answer("w", kind, value)
    assert raised.value.code == "ANSWER_INVALID"
    assert said in raised.value.message and raised.value.message.endswith("The question is still open.")


def test_an_answer_that_does_not_fit_the_question_asked_is_refused() -> None:
    assert misfit(answer_of(PICK, ["a"]), PICK) is None
    assert misfit(answer_of(PICK, ["z"]), PICK) == "'z' is not one of its options"
    assert misfit(answer_of(PICK, ["a", "b"]), PICK) == "it allows one choice only"
    assert misfit(form_answer("other", "selection", ["a"]), PICK) == "it was given for another question"
    assert misfit(answer_of(FORM, {"name": "Nest", "size": 2}), FORM) is None
    with pytest.raises(CrewError, match="size: 0 is less than the minimum of 1"):
        checked_answer(FORM, {"name": "Nest", "size": 0})


def test_only_a_typed_confirm_grants_a_state_change() -> None:
    yes = ConfirmationAnswer(widget_id="workflow_state_change_confirm", value=Confirmed(confirmed=True))
    assert confirms_state_change(yes)
    assert not confirms_state_change(yes.model_copy(update={"value": Confirmed(confirmed=False)}))
    assert not confirms_state_change(ConfirmationAnswer(widget_id="other", value=Confirmed(confirmed=True)))
    assert not confirms_state_change(widget_submit_text(yes))  # the same words typed are only words
