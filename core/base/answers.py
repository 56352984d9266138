"""A person's answer to an open question (a `ui_ask_user` widget, a tool approval, the Confirm of a
state change), as a typed value from the surface that took it to the run that reads it.

A surface builds an answer where it takes it (`answer_of`, or a class here), refused when the value
cannot be an answer of the question's kind; the session service then checks it fits the question
actually asked (`misfit`; `checked_answer` does both), so a forged value never reaches a run. The
engine decides on the typed value (an approval's decision, a state-change confirmation); only the
text the model reads is made from it, in core.base.wrappers. A run input is therefore either what
the person typed (`str`) or a `FormAnswer`, never text that must be parsed back.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError, model_validator

from .errors import CrewError

STATE_CHANGE_CONFIRM_ID = "workflow_state_change_confirm"
ANSWER_INVALID = "ANSWER_INVALID"
Decision = Literal["approve", "deny", "allow_for_run"]


class _Answer(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    widget_id: str = Field(min_length=1)


class Confirmed(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    confirmed: bool


class PlanDecision(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    decision: Literal["approve", "request_changes"]
    feedback: str | None = None


class ApprovalDecision(BaseModel):
    """Who decided on a held tool call, and how; `by` goes into the run's audit log."""

    model_config = ConfigDict(frozen=True, extra="ignore")
    decision: Decision
    by: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _older_shape(cls, data: Any) -> Any:
        """`{"approved": bool, "by": …}`, what surfaces sent before decisions had names."""
        if isinstance(data, dict) and "decision" not in data and isinstance(data.get("approved"), bool):
            return {**data, "decision": "approve" if data["approved"] else "deny"}
        return data


class SelectionAnswer(_Answer):
    type: Literal["selection"] = "selection"
    value: list[str]  # always a list, one item unless the question allows several


class ActionAnswer(_Answer):
    type: Literal["action_selection"] = "action_selection"
    value: str  # the chosen action's id


class ConfirmationAnswer(_Answer):
    type: Literal["confirmation"] = "confirmation"
    value: Confirmed


class PlanReviewAnswer(_Answer):
    type: Literal["plan_review"] = "plan_review"
    value: PlanDecision


class FeedbackAnswer(_Answer):
    type: Literal["feedback"] = "feedback"
    value: dict[str, str]  # item id → comment


class FieldsAnswer(_Answer):
    type: Literal["form"] = "form"
    value: dict[str, JsonValue]  # field name → value, as the question's schema describes them


class ApprovalAnswer(_Answer):
    type: Literal["tool_approval", "mcp_approval"] = "tool_approval"  # mcp_approval: asked the older way
    value: ApprovalDecision


FormAnswer = Annotated[
    Union[SelectionAnswer, ActionAnswer, ConfirmationAnswer, PlanReviewAnswer, FeedbackAnswer, FieldsAnswer,
          ApprovalAnswer],
    Field(discriminator="type"),
]
UserInput = Union[str, FormAnswer]  # what a person gives a run or a conversation: typed words or an answer
_ANSWERS: TypeAdapter[FormAnswer] = TypeAdapter(FormAnswer)


def form_answer(widget_id: str, widget_type: str, value: Any) -> FormAnswer:
    """The typed answer of type `widget_type`; CrewError ANSWER_INVALID when `value` cannot be one."""
    try:
        return _ANSWERS.validate_python({"widget_id": widget_id, "type": widget_type, "value": value})
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        if first["type"] == "union_tag_invalid":
            why = f"questions of type '{widget_type}' are not answered this way"
        else:
            where = ".".join(str(part) for part in first["loc"][1:])
            why = f"{where}: {first['msg']}" if where else first["msg"]
        raise refused(why) from None


def refused(why: str) -> CrewError:
    """The error a person sees for an answer that cannot be used; `why` says what is wrong with it."""
    return CrewError(ANSWER_INVALID, f"That answer cannot be used: {why}. The question is still open.")


def answer_of(widget: dict[str, Any], value: Any) -> FormAnswer:
    """The typed answer to the question `widget` (a ui_ask_user or approval payload) with `value`."""
    return form_answer(str(widget.get("widgetId") or ""), str(widget.get("type") or ""), value)


def checked_answer(widget: dict[str, Any], value: Any) -> FormAnswer:
    """`answer_of`, refused too when the answer does not fit the question (see `misfit`)."""
    answer = answer_of(widget, value)
    why = misfit(answer, widget)
    if why is not None:
        raise refused(why)
    return answer


def wire_value(answer: FormAnswer) -> Any:
    """The answer's value as JSON data, the way the spec's WIDGET_SUBMIT carries it."""
    return answer.model_dump(mode="json", exclude_none=True)["value"]


def confirms_state_change(given: UserInput | None) -> bool:
    """True iff `given` is the person's Confirm of the post-completion state-change question."""
    return (
        isinstance(given, ConfirmationAnswer)
        and given.widget_id == STATE_CHANGE_CONFIRM_ID
        and given.value.confirmed
    )


def misfit(answer: FormAnswer, widget: dict[str, Any]) -> str | None:
    """Why `answer` does not answer the question `widget` asked (None when it does), said for the person."""
    if answer.widget_id != widget.get("widgetId") or answer.type != widget.get("type"):
        return "it was given for another question"
    if isinstance(answer, SelectionAnswer):
        return _selection_misfit(answer.value, widget)
    if isinstance(answer, ActionAnswer):
        ids = {str(a.get("id")) for a in widget.get("actions") or [] if isinstance(a, dict)}
        return None if answer.value in ids else f"'{answer.value}' is not one of its actions"
    if isinstance(answer, FeedbackAnswer):
        ids = {str(i.get("id")) for i in widget.get("items") or [] if isinstance(i, dict)}
        unknown = sorted(set(answer.value) - ids)
        return f"it comments on items the question does not have ({', '.join(unknown)})" if unknown else None
    if isinstance(answer, FieldsAnswer):
        return _fields_misfit(answer.value, widget.get("schema"))
    return None


def _selection_misfit(picked: list[str], widget: dict[str, Any]) -> str | None:
    values = {str(o.get("value")) for o in widget.get("options") or [] if isinstance(o, dict)}
    unknown = [p for p in picked if p not in values]
    if unknown:
        return f"'{unknown[0]}' is not one of its options"
    if not picked:
        return "nothing was chosen"
    if len(picked) > 1 and not widget.get("multi"):
        return "it allows one choice only"
    return None


def _fields_misfit(fields: dict[str, Any], schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return None
    try:
        error = next(iter(Draft202012Validator(schema).iter_errors(fields)), None)
    except SchemaError:
        return None  # the question's own schema is broken: the run was told when it asked
    if error is None:
        return None
    where = ".".join(str(p) for p in error.path)
    return f"{where}: {error.message}" if where else error.message
