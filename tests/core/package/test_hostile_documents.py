"""Hostile YAML and JSON from the model or a package: alias bombs, deep nesting, runtime-owned fields."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from crewagent.cli.main import main
from crewagent.core.bmad_import import import_bmad
from crewagent.core.package.loader import PackageInvalid, load_package
from crewagent.core.document.state import MAX_STATE_BYTES, read_state
from tests.support.bmad_trees import installed_bmad
from tests.support.hostile import BOMB_YAML, hostile_run_leaves_others_served, watchdog  # noqa: F401  (fixture)
from tests.support.scripts import write
from tests.support.package_files import make_package
from tests.support.state_run import Run, error, run  # noqa: F401  (fixture)

BOMB_STATE = (
    '---\nschemaVersion: "1.1"\nworkflowType: "hello-linear"\ncurrentNodeId: "step-01-ask"\n'
    f"stepsCompleted: []\nvariables:\n{BOMB_YAML}\n---\n# state\n"
)


# --- the run state -----------------------------------------------------------------------------


async def test_alias_bomb_in_the_state_is_refused_and_other_threads_are_served(project: Path, watchdog: None) -> None:
    [result] = await hostile_run_leaves_others_served(project, [write("@state/workflow.md", BOMB_STATE)])
    assert result["ok"] is False
    assert result["error"]["code"] == "E_INVALID_FRONTMATTER"
    assert "aliases" in result["error"]["message"]


async def test_alias_bomb_state_write_leaves_the_file_as_it_was(run: Run, watchdog: None) -> None:  # noqa: F811
    before = run.state_file.read_bytes()
    bomb = BOMB_STATE.replace("hello-linear", "demo").replace("step-01-ask", "s1")
    err = error(await run.call("fs_write", {"path": "@state/workflow.md", "content": bomb}))
    assert err["code"] == "E_INVALID_FRONTMATTER" and "anchors and aliases" in err["message"]
    assert run.state_file.read_bytes() == before


async def test_a_bomb_already_on_disk_reads_as_a_clear_error(run: Run, watchdog: None) -> None:  # noqa: F811
    run.state_file.write_text(BOMB_STATE)
    with pytest.raises(Exception) as info:
        read_state(run.state_dir)
    assert "aliases" in str(info.value)


async def test_deeply_nested_and_oversized_state_values_are_refused(run: Run) -> None:  # noqa: F811
    before = run.state_file.read_bytes()
    deep: object = "x"
    for _ in range(100):
        deep = [deep]
    err = error(await run.patch({"variables": {"set": {"deep": deep}}}))
    assert err["code"] == "E_STATE_TOO_DEEP"
    big = "y" * (MAX_STATE_BYTES // 2)
    assert (await run.patch({"variables": {"set": {"a": big}}})).result["ok"] is True
    err = error(await run.patch({"variables": {"set": {"b": big}}}))
    assert err["code"] == "E_STATE_TOO_LARGE" and "artifact" in err["message"]
    assert read_state(run.state_dir)["variables"]["a"] == big and "b" not in read_state(run.state_dir)["variables"]
    assert len(before) < len(run.state_file.read_bytes()) <= MAX_STATE_BYTES


async def test_runtime_owned_fields_are_read_only_to_the_model(run: Run) -> None:  # noqa: F811
    before = run.state_file.read_bytes()
    for field, value in [("runId", "stolen"), ("workflowRef", "other"), ("workflowType", "other"),
                         ("activeAgentId", "root")]:
        err = error(await run.patch({field: {"set": value}}))
        assert err["code"] == "E_READ_ONLY_FIELD" and field in err["message"], field
    err = error(await run.call("fs_write", {"path": "@state/workflow.md",
                                            "content": before.decode().replace("runId: r1", "runId: r2")}))
    assert err["code"] == "E_READ_ONLY_FIELD" and 'Keep runId: "r1"' in err["message"]
    assert run.state_file.read_bytes() == before

    # A whole-file write that leaves the runtime's fields out keeps them.
    text = before.decode()
    for line in ("runId: r1\n", "workflowRef: demo\n", "activeAgentId: a\n"):
        assert line in text
        text = text.replace(line, "")
    assert (await run.call("fs_write", {"path": "@state/workflow.md", "content": text})).result["ok"] is True
    state = read_state(run.state_dir)
    assert (state["runId"], state["workflowRef"], state["activeAgentId"]) == ("r1", "demo", "a")


async def test_deeply_nested_tool_arguments_are_an_error_value(run: Run) -> None:  # noqa: F811
    raw = '{"path": "@state/workflow.md", "patch": ' + "[" * 200_000 + "]" * 200_000 + "}"
    outcome = await run.host.execute("fs_apply_patch", raw, run.ctx, call_id="deep")
    assert outcome.result["ok"] is False and outcome.result["error"]["code"] == "TOOL_ARGS_INVALID_JSON"


# --- packages ----------------------------------------------------------------------------------


def _bomb_template(root: Path) -> None:
    path = root / "workflow.md"
    text = path.read_text(encoding="utf-8")
    assert "variables: {}\n" in text
    path.write_text(text.replace("variables: {}\n", f"variables:\n{BOMB_YAML}\n"), encoding="utf-8")


def _bomb_step(root: Path) -> None:
    path = root / "steps" / "step-01.md"
    path.write_text(path.read_text(encoding="utf-8").replace("---\n", f"---\nextra:\n{BOMB_YAML}\n", 1))


def _deep_yaml_step(root: Path) -> None:
    path = root / "steps" / "step-01.md"
    path.write_text(path.read_text(encoding="utf-8").replace("---\n", "---\nextra: " + "[" * 500 + "]" * 500 + "\n", 1))


def _deep_json(rel: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        (root / rel).write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")

    return change


def _shallow_but_deep_json(rel: str) -> Callable[[Path], None]:
    """Deep enough to pass the JSON parser, too deep for anything to need."""

    def change(root: Path) -> None:
        text = (root / rel).read_text(encoding="utf-8")
        (root / rel).write_text(text.replace("{", '{"deep": ' + "[" * 500 + "]" * 500 + ", ", 1), encoding="utf-8")

    return change


@pytest.mark.parametrize(
    "mutate, file, message",
    [
        (_bomb_template, "workflow.md", "anchors and aliases"),
        (_bomb_step, "steps/step-01.md", "anchors and aliases"),
        (_deep_yaml_step, "steps/step-01.md", "nested"),
        (_deep_json("bmad.json"), "bmad.json", "nested more than"),
        (_deep_json("agents.json"), "agents.json", "nested more than"),
        (_deep_json("workflow.graph.json"), "workflow.graph.json", "nested more than"),
        (_shallow_but_deep_json("agents.json"), "agents.json", "nested more than"),
    ],
    ids=["template-bomb", "step-bomb", "step-deep-yaml", "bmad-deep", "agents-deep", "graph-deep", "agents-500-deep"],
)
def test_validate_rejects_hostile_documents_with_a_readable_problem(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    watchdog: None,
    mutate: Callable[[Path], None],
    file: str,
    message: str,
) -> None:
    root = make_package(tmp_path / "pkg")
    mutate(root)
    assert main(["validate", str(root)]) == 1
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "RecursionError" not in out + err
    assert any(line.startswith(f"{file}: ") and message in line for line in out.splitlines()), out
    assert out.splitlines()[-1] == f"INVALID {root}: 1 error"  # the path as it was typed
    with pytest.raises(PackageInvalid):
        load_package(root)



def test_an_agent_yaml_bomb_in_a_bmad_tree_is_left_out_of_the_import(tmp_path: Path, watchdog: None) -> None:
    root = installed_bmad(tmp_path / "project")
    (root / "plans/agents/bomb.agent.yaml").write_text(f"agent:\n  metadata:\n{BOMB_YAML}\n", encoding="utf-8")
    result = import_bmad(tmp_path / "project")
    report = result.files["IMPORT-REPORT.md"]
    assert isinstance(report, str)
    assert "plans/agents/bomb.agent.yaml" in report and "anchors and aliases" in report
