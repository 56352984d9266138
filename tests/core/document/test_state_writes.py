"""Every change to @state/workflow.md is validated; a rejected change leaves the file byte-identical."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from crewagent.core.base.errors import CrewError
from crewagent.core.document.state import init_state_text, is_complete, parse_text, record_artifacts, render_text, steps_done
from tests.support.state_run import GRAPH, NOW, TEMPLATE, Run, error, run  # noqa: F401  (fixture)

# --- initial state and reading --------------------------------------------------------------------


def test_init_state_sets_run_fields_and_resets_progress() -> None:
    dirty = TEMPLATE.replace("stepsCompleted: []", "stepsCompleted: [s1]").replace("variables: {}", "variables: {a: 1}")
    fm_text = init_state_text(dirty, GRAPH, run_id="r9", agent_id="sm", workflow_id="demo", now=NOW)
    assert "Body text kept as is." in fm_text
    fm, _ = parse_text(fm_text)
    assert fm["runId"] == "r9" and fm["activeAgentId"] == "sm" and fm["workflowRef"] == "demo"
    assert fm["updatedAt"] == NOW and fm["currentNodeId"] == "s1"
    assert fm["stepsCompleted"] == [] and fm["variables"] == {} and fm["workflowType"] == "demo"


def test_init_state_rejects_a_template_without_frontmatter() -> None:
    with pytest.raises(CrewError) as info:
        init_state_text("# no frontmatter\n", GRAPH, run_id="r", agent_id="a", workflow_id="w", now=NOW)
    assert info.value.code == "STATE_INIT_FAILED"


def test_read_state_fills_defaults_and_drops_empty_timestamps(run: Run) -> None:
    run.state_file.write_text('---\nschemaVersion: "1.1"\nworkflowType: t\ncurrentNodeId: ""\nupdatedAt: ""\n---\n')
    fm = run.state()
    assert fm["stepsCompleted"] == [] and fm["variables"] == {} and fm["artifacts"] == [] and fm["decisionLog"] == []
    assert "updatedAt" not in fm


def test_completion_rules() -> None:
    assert is_complete({"variables": {"workflowStatus": "complete"}, "currentNodeId": "s1"}, GRAPH)
    assert is_complete({"currentNodeId": "end", "stepsCompleted": ["s1", "end"]}, GRAPH)
    assert not is_complete({"currentNodeId": "end", "stepsCompleted": ["s1"]}, GRAPH)
    assert not is_complete({"currentNodeId": "", "stepsCompleted": []}, GRAPH)
    assert steps_done({"stepsCompleted": ["s1", "decide", "ghost", "s1"]}, GRAPH) == 2


# --- rejections leave the file byte-identical --------------------------------------------------------


async def test_illegal_transition_lists_allowed_next(run: Run) -> None:
    run.set_state(currentNodeId="decide", stepsCompleted=["s1"])
    before = run.state_file.read_bytes()
    err = error(await run.patch({"currentNodeId": {"set": "end"}}))
    assert err["code"] == "E_INVALID_TRANSITION"
    assert "decide → end" in err["message"]
    assert err["details"]["from"] == "decide" and err["details"]["to"] == "end"
    assert err["details"]["allowedNext"] == [
        {"to": "green", "label": "greenfield", "isDefault": False, "conditionText": "variables.kind == 'green'"},
        {"to": "brown", "label": "brownfield", "isDefault": True, "conditionText": None},
    ]
    assert run.state_file.read_bytes() == before


async def test_unknown_node_is_an_invalid_transition(run: Run) -> None:
    before = run.state_file.read_bytes()
    err = error(await run.patch({"currentNodeId": "step-99"}))
    assert err["code"] == "E_INVALID_TRANSITION" and "step-99" in err["message"]
    assert err["details"]["allowedNext"][0]["to"] == "decide"
    assert run.state_file.read_bytes() == before


async def test_removing_completed_steps_is_rejected(run: Run) -> None:
    run.set_state(currentNodeId="decide", stepsCompleted=["s1"])
    before = run.state_file.read_bytes()
    text = before.decode().replace("- s1\n", "").replace("stepsCompleted:\n", "stepsCompleted: []\n")
    err = error(await run.call("fs_write", {"path": "@state/workflow.md", "content": text}))
    assert err["code"] == "E_INVALID_TRANSITION" and "s1" in err["message"]
    assert err["details"]["removed"] == ["s1"]
    assert run.state_file.read_bytes() == before


async def test_invalid_yaml_is_rejected_with_a_line(run: Run) -> None:
    before = run.state_file.read_bytes()
    bad = '---\nschemaVersion: "1.1"\nworkflowType: demo\ncurrentNodeId: [s1\nstepsCompleted: []\n---\n'
    err = error(await run.call("fs_write", {"path": "@state/workflow.md", "content": bad}))
    assert err["code"] == "E_INVALID_FRONTMATTER"
    assert "line" in err["message"]
    assert run.state_file.read_bytes() == before


@pytest.mark.parametrize(
    ("entry", "where"),
    [
        ({"from": "s1", "to": "decide", "label": "next", "why": "extra key"}, "decisionLog[0]"),
        ({"from": "s1", "to": "decide", "label": "next", "decidedAt": "yesterday"}, "decisionLog[0].decidedAt"),
        ({"from": "s1", "label": "next"}, "decisionLog[0]"),
    ],
)
async def test_schema_violations_are_rejected_with_paths(run: Run, entry: dict, where: str) -> None:
    before = run.state_file.read_bytes()
    err = error(await run.patch({"decisionLog": {"append": [entry]}}))
    assert err["code"] == "E_SCHEMA_VALIDATION"
    assert any(e["path"] == where for e in err["details"]["errors"]), err
    assert all(set(e) == {"path", "message"} for e in err["details"]["errors"])
    assert run.state_file.read_bytes() == before


async def test_missing_required_field_is_a_schema_violation(run: Run) -> None:
    before = run.state_file.read_bytes()
    content = '---\nschemaVersion: "1.1"\ncurrentNodeId: s1\n---\n# x\n'
    err = error(await run.call("fs_write", {"path": "@state/workflow.md", "content": content}))
    assert err["code"] == "E_SCHEMA_VALIDATION" and "workflowType" in err["message"]
    assert run.state_file.read_bytes() == before


async def test_if_match_sha256_mismatch_is_rejected(run: Run) -> None:
    before = run.state_file.read_bytes()
    err = error(await run.patch({"variables": {"set": {"k": "v"}}}, ifMatchSha256="0" * 64))
    assert err["code"] == "E_PRECONDITION_FAILED"
    assert run.state_file.read_bytes() == before
    read = await run.call("fs_read", {"path": "@state/workflow.md"})
    ok = await run.patch({"variables": {"set": {"k": "v"}}}, ifMatchSha256=read.result["sha256"])
    assert ok.result["ok"] is True and ok.result["sha256Before"] == read.result["sha256"]


# --- accepted changes ------------------------------------------------------------------------------------


async def test_legal_transition_with_full_patch(run: Run) -> None:
    outcome = await run.patch(
        {
            "stepsCompleted": {"append": ["s1"]},
            "currentNodeId": {"set": "decide"},
            "variables": {"set": {"kind": "green"}},
            "artifacts": {"append": ["artifacts/intake.md"]},
            "updatedAt": {"set": "2025-06-01T11:00:00Z"},
        }
    )
    assert outcome.result["ok"] is True and outcome.state_changed is True
    fm = run.state()
    assert fm["currentNodeId"] == "decide" and fm["stepsCompleted"] == ["s1"]
    assert fm["variables"] == {"kind": "green"} and fm["artifacts"] == ["artifacts/intake.md"]
    assert "Body text kept as is." in run.state_file.read_text()


async def test_append_is_unique_and_variables_merge_shallowly(run: Run) -> None:
    await run.patch({"variables": {"set": {"a": 1, "nested": {"x": 1}}}, "stepsCompleted": {"append": ["s1"]}})
    await run.patch({"variables": {"b": 2, "nested": {"y": 2}}, "stepsCompleted": {"append": ["s1", "s1"]}})
    fm = run.state()
    assert fm["variables"] == {"a": 1, "b": 2, "nested": {"y": 2}}
    assert fm["stepsCompleted"] == ["s1"]


async def test_decision_with_log_entry_and_plain_values(run: Run) -> None:
    run.set_state(currentNodeId="decide", stepsCompleted=["s1"])
    outcome = await run.call(
        "fs_apply_patch",
        {
            "path": "@state/workflow.md",
            "operation": "updateFrontmatter",  # the flat legacy form
            "update": {
                "currentNodeId": "brown",
                "stepsCompleted": {"append": "decide"},
                "decisionLog": {"append": [{"from": "decide", "to": "brown", "label": "brownfield", "decidedAt": ""}]},
            },
        },
    )
    assert outcome.result["ok"] is True, outcome.result
    fm = run.state()
    assert fm["currentNodeId"] == "brown" and fm["stepsCompleted"] == ["s1", "decide"]
    assert fm["decisionLog"] == [{"from": "decide", "to": "brown", "label": "brownfield"}]


async def test_same_node_update_is_always_allowed(run: Run) -> None:
    run.set_state(currentNodeId="end", stepsCompleted=["s1", "decide", "green"])
    outcome = await run.patch({"stepsCompleted": {"append": ["end"]}, "variables": {"set": {"workflowStatus": "complete"}}})
    assert outcome.result["ok"] is True
    assert is_complete(run.state(), GRAPH)


async def test_empty_current_node_means_the_entry_node(run: Run) -> None:
    run.set_state(currentNodeId="")
    assert (await run.patch({"currentNodeId": "s1"})).result["ok"] is True  # "" -> entry: no move
    run.set_state(currentNodeId="")
    assert (await run.patch({"currentNodeId": "decide"})).result["ok"] is True  # "" -> successor of entry
    run.set_state(currentNodeId="")
    assert error(await run.patch({"currentNodeId": "green"}))["code"] == "E_INVALID_TRANSITION"


async def test_whole_file_write_with_unquoted_timestamps(run: Run) -> None:
    content = (
        '---\nschemaVersion: "1.1"\nworkflowType: demo\nrunId: r1\nworkflowRef: demo\nactiveAgentId: a\n'
        "updatedAt: 2025-06-01T12:00:00Z\ncurrentNodeId: decide\nstepsCompleted: [s1]\n"
        "decisionLog:\n- {from: s1, to: decide, label: next, decidedAt: 2025-06-01T12:00:00Z}\n---\n# Mine\n"
    )
    outcome = await run.call("fs_write", {"path": "@state/workflow.md", "content": content})
    assert outcome.result["ok"] is True, outcome.result
    assert run.state_file.read_text() == content
    assert run.state()["updatedAt"] == "2025-06-01T12:00:00Z"


# --- post-completion confirmation ---------------------------------------------------------------------------


def complete(run: Run) -> None:
    run.set_state(
        currentNodeId="end",
        stepsCompleted=["s1", "decide", "green", "end"],
        variables={"workflowStatus": "complete"},
    )


async def test_post_completion_change_needs_one_confirmation_per_call(run: Run) -> None:
    complete(run)
    before = run.state_file.read_bytes()
    err = error(await run.patch({"variables": {"set": {"note": "x"}}}))
    assert err["code"] == "STATE_CHANGE_REQUIRES_CONFIRMATION"
    assert "ui_ask_user" in err["message"] and "workflow_state_change_confirm" in err["message"]
    assert run.state_file.read_bytes() == before

    run.ctx.confirmation.granted = True
    assert (await run.patch({"variables": {"set": {"note": "x"}}})).result["ok"] is True
    assert run.ctx.confirmation.granted is False
    assert run.state()["variables"]["note"] == "x"

    after_first = run.state_file.read_bytes()
    content = after_first.decode().replace("note: x", "note: y")
    err = error(await run.call("fs_write", {"path": "@state/workflow.md", "content": content}))
    assert err["code"] == "STATE_CHANGE_REQUIRES_CONFIRMATION"
    assert run.state_file.read_bytes() == after_first


async def test_project_writes_after_completion_need_no_confirmation(run: Run) -> None:
    complete(run)
    outcome = await run.call("fs_write", {"path": "@project/notes.md", "content": "more"})
    assert outcome.result["ok"] is True


async def test_confirmation_is_not_spent_while_the_run_is_open(run: Run) -> None:
    run.ctx.confirmation.granted = True
    assert (await run.patch({"variables": {"set": {"a": 1}}})).result["ok"] is True
    assert run.ctx.confirmation.granted is True


# --- rewind -------------------------------------------------------------------------------------------------


async def test_rewind_needs_confirmed_argument(run: Run) -> None:
    run.set_state(currentNodeId="green", stepsCompleted=["s1", "decide"])
    before = run.state_file.read_bytes()
    err = error(await run.call("workflow_rewind", {"targetNodeId": "s1"}))
    assert err["code"] == "STATE_CHANGE_REQUIRES_CONFIRMATION"
    assert run.state_file.read_bytes() == before


async def test_rewind_target_must_be_entry_or_completed(run: Run) -> None:
    run.set_state(currentNodeId="green", stepsCompleted=["s1", "decide"])
    before = run.state_file.read_bytes()
    for target in ("brown", "nowhere"):
        err = error(await run.call("workflow_rewind", {"targetNodeId": target, "confirmed": True}))
        assert err["code"] == "E_INVALID_TRANSITION"
        assert err["details"]["allowedTargets"] == ["s1", "decide"]
    assert run.state_file.read_bytes() == before


async def test_rewind_drops_later_steps_and_logs_it(run: Run) -> None:
    run.set_state(currentNodeId="green", stepsCompleted=["s1", "decide"], variables={"kind": "green"})
    outcome = await run.call("workflow_rewind", {"targetNodeId": "decide", "confirmed": True, "reason": "wrong branch"})
    assert outcome.result["ok"] is True and outcome.state_changed
    assert outcome.result["dropped"] == ["decide"]
    fm = run.state()
    assert fm["currentNodeId"] == "decide" and fm["stepsCompleted"] == ["s1"]
    assert fm["variables"] == {"kind": "green"}
    log = fm["decisionLog"][-1]
    assert (log["from"], log["to"], log["label"], log["reason"]) == ("green", "decide", "rewind", "wrong branch")


async def test_rewind_after_completion_needs_user_confirm_and_reopens(run: Run) -> None:
    complete(run)
    before = run.state_file.read_bytes()
    err = error(await run.call("workflow_rewind", {"targetNodeId": "green", "confirmed": True}))
    assert err["code"] == "STATE_CHANGE_REQUIRES_CONFIRMATION"
    assert run.state_file.read_bytes() == before
    run.ctx.confirmation.granted = True
    outcome = await run.call("workflow_rewind", {"targetNodeId": "green", "confirmed": True})
    assert outcome.result["ok"] is True
    fm = run.state()
    assert "workflowStatus" not in fm["variables"] and not is_complete(fm, GRAPH)
    assert fm["stepsCompleted"] == ["s1", "decide"] and fm["currentNodeId"] == "green"


# --- artifacts --------------------------------------------------------------------------------------------------


async def test_new_artifact_is_recorded_once(run: Run) -> None:
    first = await run.call("fs_write", {"path": "@project/artifacts/demo/intake.md", "content": "# Intake\n"})
    assert first.result["ok"] is True
    assert first.artifacts_created == ["artifacts/demo/intake.md"] and first.state_changed
    assert first.files_written == ["@project/artifacts/demo/intake.md"]
    again = await run.call("fs_write", {"path": "@project/artifacts/demo/intake.md", "content": "# Intake v2\n"})
    assert again.artifacts_created == [] and not again.state_changed
    other = await run.call("fs_write", {"path": "@project/docs/readme.md", "content": "x"})
    assert other.artifacts_created == []
    assert run.state()["artifacts"] == ["artifacts/demo/intake.md"]


async def test_artifact_write_rolls_back_when_state_cannot_record_it(run: Run) -> None:
    run.state_file.write_text("---\nworkflowType: [broken\n---\n")
    before = run.state_file.read_bytes()
    outcome = await run.call("fs_write", {"path": "@project/artifacts/report.md", "content": "# Report\n"})
    err = error(outcome)
    assert err["code"] == "E_INVALID_FRONTMATTER" and "@project/artifacts/report.md was not written" in err["message"]
    assert not (run.project / "artifacts" / "report.md").exists()
    assert run.state_file.read_bytes() == before


def test_record_artifacts_dedupes(run: Run) -> None:
    record_artifacts(run.state_dir, GRAPH, ["artifacts/a.md"])
    fm = record_artifacts(run.state_dir, GRAPH, ["artifacts/a.md", "artifacts/b.md"])
    assert fm["artifacts"] == ["artifacts/a.md", "artifacts/b.md"]
    assert run.state()["artifacts"] == ["artifacts/a.md", "artifacts/b.md"]


async def test_state_writes_are_audited_without_contents(run: Run) -> None:
    content = run.state_file.read_text()
    await run.call("fs_write", {"path": "@state/workflow.md", "content": content})
    event = run.events[-1]
    assert event["toolName"] == "fs.write" and event["kind"] == "tool.exec"
    assert event["input"]["content"]["bytes"] == len(content.encode())
    assert len(event["input"]["content"]["sha256"]) == 64


async def test_artifact_alias_paths_are_stored_project_relative(run: Run) -> None:
    await run.call("fs_write", {"path": "@project/artifacts/a.md", "content": "a"})
    outcome = await run.patch({"artifacts": {"append": ["@project/artifacts/a.md", "./artifacts/b.md"]}})
    assert outcome.result["ok"] is True
    assert run.state()["artifacts"] == ["artifacts/a.md", "artifacts/b.md"]


# --- the fast paths give the same answers as the slow ones ------------------------------------------


_TRICKY_VALUES: list[Any] = [
    "plain",
    "",
    "yes",
    "null",
    "1.1",
    "2025-06-01T10:00:00Z",
    "a: b # not a comment",
    "- not a list",
    "multi\nline\n  indented\n",
    "x" * 200,
    "word " * 60,
    "unicode ✓ é 日本",
    "'quotes' and \"quotes\"",
    0,
    -7,
    1.5,
    True,
    None,
    [],
    {},
    ["a", "b", ["nested", {"k": "v"}]],
    {"key with spaces": [1, 2], "1": "string key", 2: "int key", "empty": {}},
    [{"from": "a", "to": "b", "label": "x", "reason": "r\nr", "decidedAt": "2025-01-01T00:00:00Z"}],
]


def test_state_text_renders_key_by_key_exactly_like_one_whole_dump() -> None:
    import yaml

    from crewagent.core.document.codec import _Dumper

    for i, value in enumerate(_TRICKY_VALUES):
        fm = {"schemaVersion": "1.1", "first": value, "currentNodeId": "s1", "last": _TRICKY_VALUES[-1 - i]}
        whole = yaml.dump(fm, Dumper=_Dumper, sort_keys=False, allow_unicode=True, default_flow_style=False)
        text = render_text(fm, "# Body\n")
        assert text == f"---\n{whole}---\n# Body\n"
        assert parse_text(text) == (fm, "# Body\n")


def test_a_changed_value_is_rendered_again_not_taken_from_the_cache() -> None:
    first = render_text({"variables": {"a": 1}, "stepsCompleted": ["s1"]}, "")
    second = render_text({"variables": {"a": 2}, "stepsCompleted": ["s1"]}, "")
    assert parse_text(first)[0]["variables"] == {"a": 1}
    assert parse_text(second)[0]["variables"] == {"a": 2}
    assert render_text({"variables": {"a": True}}, "") != render_text({"variables": {"a": 1}}, "")


def test_the_partwise_schema_check_agrees_with_the_full_validator() -> None:
    from crewagent.core.schemas import validator
    from crewagent.core.document.schema import PartwiseCheck

    full = validator("workflow-frontmatter")
    check = PartwiseCheck(full)
    base = {"schemaVersion": "1.1", "workflowType": "t", "currentNodeId": "s1", "stepsCompleted": ["s1"]}
    documents = [
        base,
        {**base, "updatedAt": "2025-06-01T10:00:00Z"},
        {**base, "updatedAt": "yesterday"},  # format: date-time
        {**base, "decisionLog": ["s1"]},  # a value valid under stepsCompleted is not valid here
        {**base, "decisionLog": [{"from": "a", "to": "b", "label": "x", "extra": 1}]},
        {**base, "stepsCompleted": ["s1", 2]},
        {**base, "artifacts": "artifacts/a.md"},  # an array property given a single value
        {**base, "artifacts": ["artifacts/a.md", "artifacts/b.md"], "decisionLog": [{"from": "a", "to": "b", "label": "x"}]},
        {k: v for k, v in base.items() if k != "workflowType"},  # required
        {**base, "schemaVersion": "2.0"},
        {**base, "unknownKey": {"anything": [1]}},  # additionalProperties: true
        ["not", "an", "object"],
    ]
    for _ in range(2):  # the second pass runs on what the first one remembered
        for doc in documents:
            expected = sorted(full.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])
            got = check.errors(doc)
            assert [(list(e.absolute_path), e.message) for e in got] == [
                (list(e.absolute_path), e.message) for e in expected
            ], doc


def test_a_schema_that_does_not_split_by_property_is_always_checked_whole() -> None:
    from jsonschema import Draft202012Validator

    from crewagent.core.document.schema import PartwiseCheck

    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    closed = Draft202012Validator(schema)
    check = PartwiseCheck(closed)
    assert check.errors({"a": "x"}) == []
    assert [e.message for e in check.errors({"a": "x", "b": 1})] == [
        "Additional properties are not allowed ('b' was unexpected)"
    ]


async def test_a_state_written_whole_by_the_model_is_read_back_as_written(run: Run) -> None:
    text = run.state_file.read_text().replace("currentNodeId: s1", "currentNodeId: s1\nnote: 'from the model'")
    outcome = await run.call("fs_write", {"path": "@state/workflow.md", "content": text})
    assert outcome.result["ok"] is True
    assert run.state_file.read_text() == text
    assert run.state()["note"] == "from the model"


async def test_a_state_changed_by_another_writer_is_read_as_it_now_is(run: Run) -> None:
    """The runtime remembers the document it last wrote; any other bytes in the file are parsed again."""
    await run.patch({"variables": {"kind": "green"}})
    written = run.state_file.read_bytes()
    assert run.state()["variables"] == {"kind": "green"}
    other = written.replace(b"kind: green", b"kind: brown")  # same size, same file name: only the bytes differ
    assert len(other) == len(written)
    run.state_file.write_bytes(other)
    assert run.state()["variables"] == {"kind": "brown"}
    outcome = await run.patch({"stepsCompleted": {"append": ["s1"]}}, ifMatchSha256=hashlib.sha256(other).hexdigest())
    assert outcome.result["ok"] is True and outcome.result["sha256Before"] == hashlib.sha256(other).hexdigest()
    run.state_file.write_bytes(written)  # back to the bytes the runtime wrote first
    assert run.state()["variables"] == {"kind": "green"} and run.state()["stepsCompleted"] == []
