"""A form answered in Slack reaches the run as a typed answer; a submission that does not fit the
question (no form of ours sends it) is refused with the reason, and the question stays open."""

from __future__ import annotations

from pathlib import Path

from tests.support.bot_harness import bot_harness, elements
from tests.support.fakes.llm_server import Reply
from tests.support.probe_tool import last_user
from tests.support.scripts import Body, calls, parse_widget_submit

TOPPINGS = {
    "widgetId": "toppings", "type": "selection", "multi": True, "message": "Which toppings?",
    "options": [{"value": "cheese", "label": "Cheese"}, {"value": "olives", "label": "Olives"},
                {"value": "basil", "label": "Basil"}],
}
ANSWER_SENT = 'WIDGET_SUBMIT\n{"widgetId": "toppings", "type": "selection", "value": ["cheese", "olives"]}'


def _model(body: Body) -> Reply:
    said = last_user(body)
    if said == "pick toppings":
        return calls(("ui_ask_user", TOPPINGS))
    submitted = parse_widget_submit(said)
    if submitted is not None:
        return Reply(content=f"Chosen: {', '.join(submitted['value'])}.")
    return Reply(content="What should we do?")


def _chosen(*values: str) -> dict[str, object]:
    picked = [{"text": {"type": "plain_text", "text": v}, "value": v} for v in values]
    return {"field:choice": {"value": {"type": "multi_static_select", "selected_options": picked}}}


async def test_a_form_answer_reaches_the_run_typed_and_a_forged_one_is_refused(project: Path) -> None:
    async with bot_harness(project, ["multi-workflows"]) as h:
        h.llm.responder = _model
        top = await h.start_waiting_run("hello-linear")
        mark = h.mark()
        await h.reply(top, "pick toppings")
        await h.posted_text("Which toppings?", since=mark)
        await h.settle()
        opener, question = h.button(top, "Choose")
        mark = h.mark()
        await h.click(opener, question)
        view = (await h.slack.wait_for("views.open", since=mark))["view"]

        asked = len(h.llm.requests)
        mark = h.mark()
        status, ack = await h.submit_form(view, _chosen("cheese", "anchovies"))
        assert status == 200 and not (ack or {}).get("response_action")
        refusal = await h.ephemeral("That answer cannot be used", since=mark, user="U1")
        assert refusal["text"] == ("That answer cannot be used: 'anchovies' is not one of its options. "
                                   "The question is still open.")
        await h.settle()
        assert len(h.llm.requests) == asked  # the run never saw it
        still_open = next(m for m in h.thread(top) if m["ts"] == question["ts"])
        assert elements(still_open) != []

        mark = h.mark()
        status, ack = await h.submit_form(view, _chosen("cheese", "olives"))
        assert status == 200 and not (ack or {}).get("response_action")
        await h.posted_text("Chosen: cheese, olives.", since=mark)
        sent = [m["content"] for m in h.llm.requests[-1]["messages"] if m["role"] == "user"]
        assert sent[-1].startswith("USER_INPUT\n- forNodeId: ") and sent[-1].endswith("\n" + ANSWER_SENT)
