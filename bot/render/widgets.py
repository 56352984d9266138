"""`ui_ask_user` widgets as thread messages: buttons where one click answers, a modal where typing is needed.

Buttons carry the widget id, the run id and an option index; the value itself is looked up in
the session's pending widget at click time, so a stale or forged click cannot inject an answer.
"""

from __future__ import annotations

from typing import Any

from crewagent.core.api.sessions import FormAnswer, answers

from ..base import actions as act
from ..base.actions import ButtonValue, FormMode
from .message import BlockJSON, SlackMessage
from .blocks import actions_block, button, choices, context, reply, section
from .approval_buttons import approval_answer, approval_controls, approval_outcome, is_approval
from .mrkdwn import escape, to_mrkdwn

CONFIRM_WIDGET = "workflow_state_change_confirm"


def _options(widget: dict[str, Any], key: str) -> list[dict[str, Any]]:
    items = widget.get(key) or []
    return [o for o in items if isinstance(o, dict)]


def form_mode(widget: dict[str, Any]) -> FormMode | None:
    """Which modal answers this widget, if it is answered through one."""
    kind = widget.get("type")
    if kind == "form":
        return "form"
    if kind == "feedback":
        return "feedback"
    if kind == "selection" and widget.get("multi"):
        return "multi_select"
    return None


def answer_for(widget: dict[str, Any], value: ButtonValue, user: str = "") -> FormAnswer | None:
    """The answer a button click by `user` stands for; None when the click names no answer of the widget."""
    if is_approval(widget):
        return approval_answer(widget, value, user)
    kind, widget_id = widget.get("type"), str(value.w)
    if kind == "confirmation" and value.c is not None:
        return answers.ConfirmationAnswer(widget_id=widget_id, value=answers.Confirmed(confirmed=bool(value.c)))
    if kind == "plan_review" and value.c is True:
        return answers.PlanReviewAnswer(widget_id=widget_id, value=answers.PlanDecision(decision="approve"))
    if value.i is None:
        return None
    if kind == "selection":
        options = _options(widget, "options")
        if 0 <= value.i < len(options):
            return answers.SelectionAnswer(widget_id=widget_id, value=[str(options[value.i].get("value"))])
    if kind == "action_selection":
        actions = _options(widget, "actions")
        if 0 <= value.i < len(actions):
            return answers.ActionAnswer(widget_id=widget_id, value=str(actions[value.i].get("id")))
    return None


def answered_text(widget: dict[str, Any], value: ButtonValue, name: str) -> str:
    """What a button answer did, said on the question once it is answered (`name`: who, as shown)."""
    who = escape(name)
    kind = widget.get("type")
    if is_approval(widget):
        return approval_outcome(widget, value, name)
    if kind == "confirmation":
        if str(widget.get("widgetId")) == CONFIRM_WIDGET:
            return f"{'Confirmed' if value.c else 'Cancelled'} by {who}."
        return f"{who} answered *{'Yes' if value.c else 'No'}*."
    if kind == "plan_review":
        return f"Approved by {who}."
    key = "options" if kind == "selection" else "actions"
    items = _options(widget, key)
    if value.i is not None and 0 <= value.i < len(items):
        item = items[value.i]
        label = str(item.get("label") or item.get("value") or item.get("id"))
        return f"{who} chose *{to_mrkdwn(label)}*."
    return f"Answered by {who}."


def form_answered(widget: dict[str, Any], mode: str, name: str) -> SlackMessage:
    """The question a form answered, its buttons replaced by who answered it."""
    who = escape(name)
    outcome = {
        "changes": f"Changes requested by {who}.",
        "feedback": f"Feedback given by {who}.",
    }.get(mode, f"Answered by {who}.")
    question = str(widget.get("message") or "Please answer:")
    return SlackMessage(text=question, blocks=[section(to_mrkdwn(question)), context(f":white_check_mark: {outcome}")])


def _confirmation_buttons(base: ButtonValue, *, final: bool) -> BlockJSON:
    """Yes / No, or Confirm / Cancel for the post-completion state-change confirmation."""
    yes, no = base.model_copy(update={"c": True}), base.model_copy(update={"c": False})
    return actions_block(
        [
            button("Confirm" if final else "Yes", act.action_id(act.WIDGET, "yes"), yes, "primary"),
            button("Cancel" if final else "No", act.action_id(act.WIDGET, "no"), no),
        ]
    )


def _selection_controls(widget: dict[str, Any], base: ButtonValue, field: str) -> list[BlockJSON]:
    """The options (or actions) as buttons or a menu, after a list of those that carry a description."""
    items = _options(widget, field)
    labels = [str(o.get("label") or o.get("value") or o.get("id")) for o in items]
    described = [
        f"• *{to_mrkdwn(lbl)}* — {to_mrkdwn(str(o['description']))}"
        for lbl, o in zip(labels, items)
        if o.get("description")
    ]
    controls: list[BlockJSON] = [section("\n".join(described))] if described else []
    return controls + choices(
        act.WIDGET,
        labels,
        [base.model_copy(update={"i": i}) for i in range(len(items))],
        select_context=base,
        option_values=[str(i) for i in range(len(items))],
        placeholder="Choose",
    )


def widget_messages(widget: dict[str, Any], *, key: str, run_id: str | None) -> list[SlackMessage]:
    """The question and its controls."""
    widget_id = str(widget.get("widgetId") or "")
    kind = widget.get("type")
    message = str(widget.get("message") or "Please answer:")
    messages = reply(message)
    base = ButtonValue(s=key, r=run_id, w=widget_id)
    controls: list[BlockJSON] = []

    if is_approval(widget):
        controls += approval_controls(widget, base)
    elif kind == "confirmation":
        controls.append(_confirmation_buttons(base, final=widget_id == CONFIRM_WIDGET))
    elif kind in ("selection", "action_selection") and form_mode(widget) is None:
        controls += _selection_controls(widget, base, "options" if kind == "selection" else "actions")
    elif kind == "plan_review":
        approve, changes = base.model_copy(update={"c": True}), base.model_copy(update={"x": "changes"})
        plan = str(widget.get("planContent") or "")
        if plan.strip():
            messages += reply(plan)
        controls.append(
            actions_block(
                [
                    button("Approve", act.action_id(act.WIDGET, "approve"), approve, "primary"),
                    button("Request changes", act.action_id(act.FORM, "changes"), changes),
                ]
            )
        )
    elif form_mode(widget) is not None:
        mode = form_mode(widget) or "form"
        label = {"form": "Open form", "feedback": "Give feedback", "multi_select": "Choose…"}[mode]
        opener = button(label, act.action_id(act.FORM, 0), base.model_copy(update={"x": mode}), "primary")
        controls.append(actions_block([opener]))
    else:
        controls.append(context("Reply in this thread to answer."))

    last = messages[-1]
    if len(last.blocks) + len(controls) > 50:
        messages.append(SlackMessage(text=message, blocks=controls))
    else:
        last.blocks.extend(controls)
    return messages
