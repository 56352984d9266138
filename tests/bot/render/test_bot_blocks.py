"""Block Kit rendering: Slack's limits hold by construction, Markdown reads well, forms validate."""

from __future__ import annotations

import json

import pytest
from slack_sdk.errors import SlackObjectFormationError

from crewagent.bot.render import blocks
from crewagent.bot.base.actions import ButtonValue, FormContext
from crewagent.bot.render.markdown import clean_cut
from crewagent.bot.render.modals import build_modal, parse_submission
from crewagent.bot.render.mrkdwn import split_text, to_mrkdwn
from crewagent.bot.render.widgets import answer_for, widget_messages
from crewagent.core.api.sessions import answers
from crewagent.core.base.events import RunPhase
from crewagent.core.session.outputs import AgentCard, MenuEntry
from crewagent.core.store.runs_model import RunError, RunSnapshot, RunUsage

KEY = "T1:C1:1700000000.000100"


def _check(messages: list[blocks.SlackMessage]) -> list[dict]:
    """Serialise like the SDK would (validators run in to_dict) and check the per-message block cap."""
    out = []
    for message in messages:
        payload = message.payload()
        assert 1 <= len(payload["blocks"]) <= 50
        out.append(payload)
    return out


def _buttons(payloads: list[dict]) -> list[dict]:
    return [e for p in payloads for b in p["blocks"] if b["type"] == "actions" for e in b["elements"]]


def test_markdown_becomes_mrkdwn() -> None:
    text = (
        "# Plan\nSome **bold**, *it*, ~~old~~ and [docs](https://x.io/a?b=1&c=2)\n- one\n* two\n"
        "```python\na**b** < c\n```\nUse `**raw**`."
    )
    assert to_mrkdwn(text).split("\n") == [
        "*Plan*",
        "Some *bold*, _it_, ~old~ and <https://x.io/a?b=1&amp;c=2|docs>",
        "• one",
        "• two",
        "```",
        "a**b** &lt; c",
        "```",
        "Use `**raw**`.",
    ]


def test_long_text_is_split_into_markdown_blocks_within_slacks_limit() -> None:
    text = "\n\n".join(f"Paragraph {i}: " + "word " * 400 for i in range(120)) + "\n\n| a | b |\n|---|---|\n| **x** | y |"
    messages = blocks.reply(text, AgentCard(id="sm", name="Bob", title="Scrum Master", icon="🏃"))
    payloads = _check(messages)
    assert len(payloads) > 1
    assert payloads[0]["blocks"][0] == {"type": "context", "elements": [{"type": "mrkdwn", "text": "🏃 Bob · Scrum Master"}]}
    markdown = [b for p in payloads for b in p["blocks"] if b["type"] == "markdown"]
    assert [len([b for b in p["blocks"] if b["type"] == "markdown"]) for p in payloads] == [1] * len(payloads)
    assert all(len(b["text"]) <= 12_000 for b in markdown)
    joined = "\n".join(b["text"] for b in markdown)
    assert all(f"Paragraph {i}: word" in joined for i in range(120))
    assert "| **x** | y |" in joined  # the model's Markdown as written: no conversion
    assert not [b for p in payloads for b in p["blocks"] if b["type"] == "section"]


def test_a_message_that_is_full_ends_at_the_cleanest_break_that_fits() -> None:
    text = "One two.\n\nThree four five.\nSix seven eight nine"
    assert clean_cut(text, 0, 100) == len(text)  # all of it fits
    assert clean_cut(text, 0, 30) == len("One two.\n\n")  # a paragraph break first
    assert clean_cut(text, 10, 25) == len("One two.\n\nThree four five.\n")  # else a line break
    assert clean_cut(text, 28, 12) == len("One two.\n\nThree four five.\nSix seven ")  # else a space
    assert clean_cut("x" * 50, 0, 20) == 20 and clean_cut(text, 5, 0) == 5  # a word cut only when nothing else fits
    assert clean_cut("<@U1> <@U2> and more", 0, 12, lambda s: len(s.replace("<", "<\u200b"))) == len("<@U1> ")


def test_code_block_cut_in_two_stays_closed() -> None:
    code = "```\n" + "\n".join(f"line {i} " + "x" * 60 for i in range(200)) + "\n```"
    chunks = split_text(to_mrkdwn(code), 3000)
    assert len(chunks) > 1
    assert all(c.count("```") % 2 == 0 for c in chunks)


def test_short_menu_is_buttons_with_index_labels() -> None:
    items = [MenuEntry(index=i, label=f"Do thing {i} " + "very long " * 10) for i in range(1, 4)]
    payloads = _check(blocks.menu("Hello", items, key=KEY, epoch=3))
    buttons = _buttons(payloads)
    assert [b["text"]["text"][:4] for b in buttons] == ["[1] ", "[2] ", "[3] "]
    assert all(len(b["text"]["text"]) <= 75 for b in buttons)
    assert ButtonValue.decode(buttons[1]["value"]) == ButtonValue(s=KEY, e=3, n=2)


def test_unavailable_menu_items_are_shown_without_a_button_and_with_a_reason() -> None:
    items = [MenuEntry(index=1, label="Plan"), MenuEntry(index=2, label="Dev story", unavailable="not available here yet")]
    payload = _check(blocks.menu("Menu", items, key=KEY, epoch=1))[-1]
    assert [b["text"]["text"] for b in _buttons([payload])] == ["[1] Plan"]
    assert "~[2] Dev story~ — not available here yet" in json.dumps(payload, ensure_ascii=False)


def test_long_menu_becomes_a_static_select() -> None:
    items = [MenuEntry(index=i, label=f"Item {i}") for i in range(1, 41)]
    payloads = _check(blocks.menu("Pick", items, key=KEY, epoch=1))
    actions = [b for p in payloads for b in p["blocks"] if b["type"] == "actions"]
    assert len(actions) == 1 and actions[0]["elements"][0]["type"] == "static_select"
    assert len(actions[0]["elements"][0]["options"]) == 40
    assert ButtonValue.decode(actions[0]["block_id"]) == ButtonValue(s=KEY, e=1)


def test_agent_picker_shows_icon_name_title() -> None:
    agents = [AgentCard(id="sm", name="Bob", title="Scrum Master", icon="🏃")]
    buttons = _buttons(_check(blocks.agent_picker("Hi! Pick an agent:", agents, key=KEY, epoch=1)))
    assert buttons[0]["text"]["text"] == "🏃 Bob — Scrum Master"


def _snapshot(**kw) -> RunSnapshot:
    base = dict(
        run_id="r1", workflow_id="w", workflow_name="Create Story", phase=RunPhase.RUNNING, agent_id="sm",
        agent_name="Bob (Scrum Master)", steps_done=2, steps_total=6, current_node_title="Select story",
    )
    return RunSnapshot(**{**base, **kw})


def test_status_controls_follow_the_phase() -> None:
    def names(snapshot: RunSnapshot, **kw) -> list[str]:
        return [json.loads(b["value"])["x"] for b in _buttons(_check([blocks.status(snapshot, key=KEY, **kw)]))]

    assert names(_snapshot()) == ["pause", "stop"]
    assert names(_snapshot(phase=RunPhase.WAITING_USER, paused=True)) == ["resume"]
    assert names(_snapshot(phase=RunPhase.WAITING_USER)) == []
    assert names(_snapshot(phase=RunPhase.COMPLETED, current_node_title=None)) == []
    error = RunError(code="LLM_HTTP_ERROR", message="The model endpoint failed.")
    failed = _snapshot(phase=RunPhase.FAILED, error=error)
    assert names(failed) == []  # Retry and the reason are in the one failure message, not repeated here
    assert blocks.controls_for(failed) == ["retry"]
    text = _check([blocks.status(failed, key=KEY)])[0]["blocks"][0]["text"]["text"]
    assert "The model endpoint failed." not in text and "2/6" in text
    assert "Queued" in _check([blocks.status(_snapshot(), key=KEY, queued=True)])[0]["text"]


def test_status_redraws_keep_each_runs_own_buttons() -> None:
    first = _check([blocks.status(_snapshot(), key=KEY, working=True)])[0]
    again = _check([blocks.status(_snapshot(steps_done=3), key=KEY, working=True)])[0]
    other = _check([blocks.status(_snapshot(run_id="r2"), key="T1:C1:1700000000.000200", working=True)])[0]
    assert "3/6" in again["blocks"][0]["text"]["text"] and "2/6" in first["blocks"][0]["text"]["text"]
    assert [ButtonValue.decode(b["value"]).r for b in _buttons([first, again])] == ["r1"] * 4
    assert {(v.r, v.s) for v in (ButtonValue.decode(b["value"]) for b in _buttons([other]))} == {
        ("r2", "T1:C1:1700000000.000200")
    }
    assert first["blocks"][-1] == other["blocks"][-1]  # the same hint under every running status


def test_a_block_over_a_slack_limit_fails_where_it_is_built() -> None:
    pause = blocks.button("Pause", "crew:control:pause", ButtonValue(s=KEY, r="r1", x="pause"))
    with pytest.raises(SlackObjectFormationError):
        blocks.actions_block([pause], block_id="b" * 256)
    with pytest.raises(SlackObjectFormationError):
        blocks.actions_block([blocks.button("Go", "a" * 256, ButtonValue(s=KEY))])


def test_completion_lists_artifacts_once_grouped_with_a_file_menu() -> None:
    paths = ["artifacts/a.md", "notes/c.md", "artifacts/b.md"]
    payload = _check([blocks.completion(_snapshot(phase=RunPhase.COMPLETED, artifacts=paths), key=KEY)])[0]
    sections = [b["text"]["text"] for b in payload["blocks"] if b["type"] == "section"]
    assert sections[1:] == ["*artifacts/*\n`a.md`, `b.md`", "*notes/*\n`c.md`"]
    [select] = [e for b in payload["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert [(o["text"]["text"], o["value"]) for o in select["options"]] == [
        ("artifacts/a.md", "0"), ("artifacts/b.md", "2"), ("notes/c.md", "1")  # grouped like the list; value: index
    ]
    assert ButtonValue.decode(_block_of(payload, select)["block_id"]) == ButtonValue(s=KEY, r="r1")


def test_a_long_artifact_list_says_how_many_more_and_stays_within_slack_limits() -> None:
    paths = [f"artifacts/big/f{i}.md" for i in range(30)]
    paths += [f"artifacts/d{d:02}/file-{i:03}.md" for d in range(20) for i in range(8)]  # 160 files, 20 folders
    snap = _snapshot(phase=RunPhase.COMPLETED, artifacts=paths)
    payload = _check([blocks.completion(snap, key=KEY)])[0]
    assert len(payload["blocks"]) <= blocks.MAX_BLOCKS
    text = json.dumps(payload)
    assert "190 artifacts" in text
    assert "`f11.md` and 18 more" in text  # the big folder shows 12 names
    assert "and 72 more in 9 other folders" in text  # folders d11..d19 are not shown
    [select] = [e for b in payload["blocks"] if b["type"] == "actions" for e in b["elements"]]
    assert len(select["options"]) == 100 and "first 100" in text


def _block_of(payload: dict, element: dict) -> dict:
    return next(b for b in payload["blocks"] if element in b.get("elements", []))


def test_completion_says_how_many_model_calls_and_tokens_the_run_took() -> None:
    usage = RunUsage(llm_calls=9, prompt_tokens=41_000, completion_tokens=2_345)
    snap = _snapshot(phase=RunPhase.COMPLETED, artifacts=["artifacts/a.md"], usage=usage)
    payload = _check([blocks.completion(snap, key=KEY)])[0]
    texts = [e["text"] for b in payload["blocks"] if b["type"] == "context" for e in b["elements"]]
    assert "9 model calls · 43,345 tokens" in texts
    silent = _check([blocks.completion(_snapshot(phase=RunPhase.COMPLETED), key=KEY)])[0]
    assert "model call" not in str(silent)


def test_a_token_budget_pause_shows_its_reason() -> None:
    reason = "Paused before the next model call: this run has used 9,000 of its 10,000-token budget."
    snap = _snapshot(phase=RunPhase.WAITING_USER, paused=True, error=RunError(code="RUN_TOKEN_BUDGET", message=reason))
    payload = _check([blocks.status(snap, key=KEY)])[0]
    assert "10,000-token budget" in str(payload) and "Resume" in str(payload)


def test_widgets_render_and_map_clicks_to_answers() -> None:
    confirm = {"widgetId": "workflow_state_change_confirm", "type": "confirmation", "message": "Change state?"}
    buttons = _buttons(_check(widget_messages(confirm, key=KEY, run_id="r1")))
    assert [b["text"]["text"] for b in buttons] == ["Confirm", "Cancel"]
    assert answer_for(confirm, ButtonValue.decode(buttons[0]["value"])) == answers.ConfirmationAnswer(
        widget_id="workflow_state_change_confirm", value=answers.Confirmed(confirmed=True))
    assert answer_for(confirm, ButtonValue.decode(buttons[1]["value"])).value.confirmed is False

    selection = {"widgetId": "w", "type": "selection", "message": "Which?", "options": [
        {"value": "greenfield", "label": "Greenfield"}, {"value": "brownfield", "label": "Brownfield"}]}
    buttons = _buttons(_check(widget_messages(selection, key=KEY, run_id="r1")))
    assert answer_for(selection, ButtonValue.decode(buttons[1]["value"])) == answers.SelectionAnswer(
        widget_id="w", value=["brownfield"])
    assert answer_for(selection, ButtonValue(s=KEY, w="w", i=7)) is None

    actions = {
        "widgetId": "a", "type": "action_selection", "message": "Next?", "actions": [{"id": "go", "label": "Go"}]
    }
    buttons = _buttons(_check(widget_messages(actions, key=KEY, run_id=None)))
    assert answer_for(actions, ButtonValue.decode(buttons[0]["value"])) == answers.ActionAnswer(widget_id="a", value="go")


FORM = {
    "widgetId": "details",
    "type": "form",
    "message": "Tell me more",
    "schema": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Project name", "minLength": 3},
            "size": {"type": "integer", "title": "Team size", "minimum": 1},
            "kind": {"type": "string", "enum": ["web", "mobile"]},
            "public": {"type": "boolean"},
        },
        "required": ["name", "size"],
    },
}


def _values(**fields) -> dict:
    out = {}
    for name, entry in fields.items():
        out[f"field:{name}"] = {"value": entry}
    return out


def test_form_modal_is_valid_and_marks_optional_fields() -> None:
    view = build_modal(FORM, FormContext(s=KEY, w="details", r="r1")).to_dict()
    inputs = {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}
    assert set(inputs) == {"field:name", "field:size", "field:kind", "field:public"}
    assert not inputs["field:name"].get("optional") and inputs["field:kind"]["optional"]
    assert inputs["field:size"]["element"]["type"] == "number_input"
    assert json.loads(view["private_metadata"])["w"] == "details"


def test_form_submission_validates_required_numbers_and_schema() -> None:
    answer, errors = parse_submission(FORM, "form", _values(size={"type": "number_input", "value": "x"}))
    assert answer is None
    assert errors == {"field:name": "This field is required.", "field:size": "Enter a number."}

    _, errors = parse_submission(FORM, "form", _values(name={"value": "ab"}, size={"value": "0"}))
    assert set(errors) == {"field:name", "field:size"}

    values = _values(name={"value": "TaskNest"}, size={"value": "4"})
    values["field:kind"] = {"value": {"type": "static_select", "selected_option": {"value": "web"}}}
    values["field:public"] = {"value": {"type": "radio_buttons", "selected_option": {"value": "false"}}}
    answer, errors = parse_submission(FORM, "form", values)
    assert errors == {} and answer == {"name": "TaskNest", "size": 4, "kind": "web", "public": False}


def test_a_resume_offer_says_the_bot_restarted_only_after_a_restart() -> None:
    restarted = blocks.resume_offer(key="T1:C1:1.0", run_id="r1")
    taken_over = blocks.resume_offer(key="T1:C1:1.0", run_id="r1", taken_over=True)
    assert "restarted" in restarted.text
    assert "restarted" not in taken_over.text and "Resume" in taken_over.text
