"""A corpus of broken packages, each made by breaking one thing in a valid one, and what the user is told."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import pytest

from crewagent.core.package.loader import ClassicWorkflowNotSupported, PackageInvalid, load_package, validate_path
from tests.support.package_files import edit_json, make_package, step_text, template_text


def _replace(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def change(root: Path) -> None:
        path = root / rel
        text = path.read_text(encoding="utf-8")
        assert old in text, f"fixture drift: {old!r} not in {rel}"
        path.write_text(text.replace(old, new, 1), encoding="utf-8")

    return change


def _json(rel: str, change: Callable[[dict], object]) -> Callable[[Path], None]:
    return lambda root: edit_json(root / rel, change)


def _delete(rel: str) -> Callable[[Path], None]:
    return lambda root: (root / rel).unlink()


def _agent(i: int) -> Callable[[dict], dict]:
    return lambda doc: doc["agents"][i]


CASES: list[tuple[str, Callable[[Path], None], str, str, str]] = [
    # (case id, mutation, file, json path, part of the message)
    ("missing-bmad-json", _delete("bmad.json"), "bmad.json", "", "no bmad.json"),
    ("bmad-bad-json", _replace("bmad.json", '"name": "mini",', '"name": "mini"'), "bmad.json", "$", "line 4, column 3"),
    ("agents-bad-json", _replace("agents.json", "{", "{{"), "agents.json", "$", "invalid JSON at line 1"),
    ("graph-bad-json", _replace("workflow.graph.json", "]", ""), "workflow.graph.json", "$", "invalid JSON"),
    ("bmad-schema-version", _json("bmad.json", lambda m: m.update(version="1.0")), "bmad.json", "$.version", "wrong format"),
    ("bmad-schema-unknown-key", _json("bmad.json", lambda m: m["entry"].update(stepsDir="steps/")),
     "bmad.json", "$.entry.stepsDir", "unknown field 'stepsDir'"),
    ("bmad-schema-date", _json("bmad.json", lambda m: m.update(createdAt="last tuesday")),
     "bmad.json", "$.createdAt", "not a valid date-time"),
    ("agents-schema-missing-persona", _json("agents.json", lambda d: d["agents"][1].pop("persona")),
     "agents.json", "$.agents[1].persona", "required field 'persona' is missing"),
    ("agents-schema-empty-principles", _json("agents.json", lambda d: d["agents"][1]["persona"].update(principles=[])),
     "agents.json", "$.agents[1].persona.principles", "not valid under any"),
    ("agents-schema-tools", _json("agents.json", lambda d: d["agents"][1]["tools"]["fs"].update(maxReadBytes=0)),
     "agents.json", "$.agents[1].tools.fs.maxReadBytes", "at least 1"),
    ("graph-schema-node-type", _json("workflow.graph.json", lambda g: g["nodes"][2].update(type="task")),
     "workflow.graph.json", "$.nodes[2].type", '"task" is not allowed'),
    ("graph-schema-no-edges", _json("workflow.graph.json", lambda g: g.pop("edges")),
     "workflow.graph.json", "$.edges", "required field 'edges'"),
    ("step-schema-missing-nodeId", _replace("steps/step-01.md", 'nodeId: "step-01"\n', ""),
     "steps/step-01.md", "$.nodeId", "required field 'nodeId' is missing"),
    ("step-schema-transition", _replace("steps/step-01.md", 'title: "Intake"\n', 'title: "Intake"\ntransitions: [{to: decide-02}]\n'),
     "steps/step-01.md", "$.transitions[0].label", "required field 'label'"),
    ("step-no-frontmatter", lambda r: (r / "steps/end-99.md").write_text("# Finish\n", encoding="utf-8"),
     "steps/end-99.md", "$", "no YAML frontmatter"),
    ("step-bad-yaml", _replace("steps/end-99.md", 'type: "end"', "type: [end"), "steps/end-99.md", "$", "not valid YAML"),
    ("template-schema-missing-type", _replace("workflow.md", 'workflowType: "mini"\n', ""),
     "workflow.md", "$.workflowType", "required field 'workflowType'"),
    ("template-schema-bad-date", _replace("workflow.md", 'updatedAt: ""', 'updatedAt: "soon"'),
     "workflow.md", "$.updatedAt", "not a valid date-time"),
    ("entry-workflow-missing", _delete("workflow.md"), "bmad.json", "$.entry.workflow", "workflow template 'workflow.md' does not exist"),
    ("entry-graph-missing", _delete("workflow.graph.json"), "bmad.json", "$.entry.graph", "does not exist"),
    ("entry-agents-missing", _delete("agents.json"), "bmad.json", "$.entry.agents", "agents file 'agents.json' does not exist"),
    ("entry-path-escapes", _json("bmad.json", lambda m: m["entry"].update(agents="../agents.json")),
     "bmad.json", "$.entry.agents", "is not a path inside the package"),
    ("unknown-entry-node", _json("workflow.graph.json", lambda g: g.update(entryNodeId="step-00")),
     "workflow.graph.json", "$.entryNodeId", "entry node 'step-00' is not in nodes"),
    ("dangling-edge", _json("workflow.graph.json", lambda g: g["edges"][3].update(to="end-100")),
     "workflow.graph.json", "$.edges[3].to", "edge to 'end-100' is not a node id"),
    ("duplicate-node-id", _json("workflow.graph.json", lambda g: g["nodes"][3].update(id="step-03a")),
     "workflow.graph.json", "$.nodes[3].id", "used twice"),
    ("missing-node-file", _delete("steps/step-03b.md"), "workflow.graph.json", "$.nodes[3].file",
     "step file 'steps/step-03b.md' of node 'step-03b' does not exist"),
    ("step-nodeId-mismatch", lambda r: (r / "steps/step-03a.md").write_text(step_text("step-03x", "step"), encoding="utf-8"),
     "steps/step-03a.md", "$.nodeId", "nodeId 'step-03x' does not match graph node 'step-03a'"),
    ("unknown-node-agent", _json("workflow.graph.json", lambda g: g["nodes"][2].update(agentId="ghost")),
     "workflow.graph.json", "$.nodes[2].agentId", "agent 'ghost' is not defined"),
    ("duplicate-agent-id", _json("agents.json", lambda d: d["agents"][1].update(id="guide")),
     "agents.json", "$.agents[1].id", "used twice"),
    ("menu-workflow-unresolved", _json("agents.json", lambda d: d["agents"][0]["menu"][1].update(workflow="other")),
     "agents.json", "$.agents[0].menu[1].workflow", "workflow 'other' is neither a workflow id (mini)"),
    ("menu-workflow-unknown-md", _json("agents.json", lambda d: d["agents"][0]["menu"][0].update(workflow="steps/step-01.md")),
     "agents.json", "$.agents[0].menu[0].workflow", "nor a workflow.md listed in bmad.json (workflow.md)"),
    ("menu-trigger-workflow-unresolved",
     _json("agents.json", lambda d: d["agents"][0]["menu"][0].update(triggers=[{"type": "handler", "match": "x", "workflow": "nope"}])),
     "agents.json", "$.agents[0].menu[0].triggers[0].workflow", "workflow 'nope'"),
    ("menu-exec-missing", _delete("assets/notes.md"), "agents.json", "$.agents[0].menu[2].exec",
     "exec file '@pkg/assets/notes.md' does not exist in the package"),
    ("menu-exec-unlisted-workflow",
     _json("agents.json", lambda d: d["agents"][0]["menu"][2].update(exec="workflows/x/workflow-validate-prd.md")),
     "agents.json", "$.agents[0].menu[2].exec",
     "exec 'workflows/x/workflow-validate-prd.md' names a workflow file that is not one of this package's workflows"),
    ("menu-exec-project-workflow",
     _json("agents.json", lambda d: d["agents"][0]["menu"][2].update(
         exec="{project-root}/_bmad/bmm/workflows/2-plan-workflows/create-prd/workflow-edit-prd.md")),
     "agents.json", "$.agents[0].menu[2].exec", "is not one of this package's workflows (workflow.md)"),
    ("menu-ide-and-web-only", _json("agents.json", lambda d: d["agents"][0]["menu"][3].update({"web-only": True})),
     "agents.json", "$.agents[0].menu[3]", "both ide-only and web-only"),
]


@pytest.mark.parametrize("case, mutate, file, json_path, message", CASES, ids=[c[0] for c in CASES])
def test_broken_package_is_refused_with_a_precise_problem(
    tmp_path: Path, case: str, mutate: Callable[[Path], None], file: str, json_path: str, message: str
) -> None:
    root = make_package(tmp_path / "pkg")
    mutate(root)
    with pytest.raises(PackageInvalid) as info:
        load_package(root)
    errors = info.value.errors
    assert info.value.code == "PACKAGE_INVALID"
    hits = [p for p in errors if p.file == file and p.json_path == json_path and message in p.message]
    assert hits, "\n".join(str(p) for p in errors)
    assert all(p.fix for p in errors)
    assert str(tmp_path) not in str(info.value.to_dict())  # package-relative paths only
    assert message in info.value.message or len(errors) > 1


def test_every_problem_is_collected_in_one_pass(tmp_path: Path) -> None:
    root = make_package(tmp_path / "pkg")
    edit_json(root / "bmad.json", lambda m: m.update(version="x"))
    edit_json(root / "workflow.graph.json", lambda g: g["edges"][0].update(to="nowhere"))
    edit_json(root / "agents.json", lambda d: d["agents"][0]["menu"][1].update(workflow="gone"))
    (root / "steps/end-99.md").write_text(step_text("end-98", "end"), encoding="utf-8")
    (root / "workflow.md").write_text(template_text("mini", "step-01", updated_at='"later"'), encoding="utf-8")
    package, problems = validate_path(root)
    assert package is None
    found = {(p.file, p.json_path) for p in problems if p.level == "error"}
    assert found >= {
        ("bmad.json", "$.version"),
        ("workflow.graph.json", "$.edges[0].to"),
        ("agents.json", "$.agents[0].menu[1].workflow"),
        ("steps/end-99.md", "$.nodeId"),
        ("workflow.md", "$.updatedAt"),
    }


def test_problem_renders_as_one_readable_line(tmp_path: Path) -> None:
    root = make_package(tmp_path / "pkg")
    edit_json(root / "workflow.graph.json", lambda g: g.update(entryNodeId="start"))
    _, problems = validate_path(root)
    assert [str(p) for p in problems] == [
        "workflow.graph.json: $.entryNodeId: entry node 'start' is not in nodes "
        "(fix: set entryNodeId to the id of the first node)"
    ]


def test_symlinked_entry_file_pointing_outside_is_refused(tmp_path: Path) -> None:
    root = make_package(tmp_path / "pkg")
    secret = tmp_path / "secret.json"
    secret.write_text((root / "agents.json").read_text(encoding="utf-8"), encoding="utf-8")
    (root / "agents.json").unlink()
    os.symlink(secret, root / "agents.json")
    _, problems = validate_path(root)
    assert [(p.file, p.json_path, p.message) for p in problems] == [
        ("bmad.json", "$.entry.agents", "agents file 'agents.json' points outside the package")
    ]


def test_classic_menu_workflow_is_a_warning_not_an_error(tmp_path: Path) -> None:
    root = make_package(tmp_path / "pkg")
    edit_json(root / "agents.json",
              lambda d: d["agents"][0]["menu"][1].update(workflow="{project-root}/_bmad/bmm/workflows/x/workflow.yaml"))
    package, problems = validate_path(root)
    assert package is not None
    assert [(p.level, p.code, p.json_path) for p in problems] == [
        ("warning", "NOT_SUPPORTED_CLASSIC_WORKFLOW", "$.agents[0].menu[1].workflow")
    ]


@pytest.mark.parametrize("classic_file", ["workflow.yaml", "workflow.yml", "instructions.xml", "workflows/dev/workflow.yaml"])
def test_classic_bmad_package_is_not_supported(tmp_path: Path, classic_file: str) -> None:
    root = tmp_path / "classic"
    (root / classic_file).parent.mkdir(parents=True, exist_ok=True)
    (root / classic_file).write_text("name: dev-story\ninstructions: instructions.xml\n", encoding="utf-8")
    with pytest.raises(ClassicWorkflowNotSupported) as info:
        load_package(root)
    assert isinstance(info.value, PackageInvalid)
    assert info.value.code == "NOT_SUPPORTED_CLASSIC_WORKFLOW"
    [problem] = info.value.problems
    assert problem.file == classic_file and problem.code == "NOT_SUPPORTED_CLASSIC_WORKFLOW"
    assert "only .bmad v1.1 micro-file packages" in problem.message
