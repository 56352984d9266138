"""Loading valid packages: both layouts, the examples, the typed model, archives and the cache."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crewagent.core.package.archive import pack_package
from crewagent.core.package.loader import PackageInvalid, load_package, validate_path
from tests.support.package_files import (
    edit_json,
    make_multi_package,
    make_package,
    package_entries,
    template_text,
    zip_entries,
)
from tests.support.paths import EXAMPLES


@pytest.mark.parametrize(
    "name, workflow_ids, agents, nodes",
    [
        ("create-story-micro", ["create-story-micro"], 2, 6),
        ("hello-branch", ["hello-branch"], 4, 5),
        ("multi-workflows", ["hello-linear", "hello-branch"], 4, 8),
    ],
)
def test_every_example_loads_without_problems(name: str, workflow_ids: list[str], agents: int, nodes: int) -> None:
    package, problems = validate_path(EXAMPLES / name)
    assert problems == []
    assert package is not None
    assert package.id == name
    assert [w.id for w in package.workflows] == workflow_ids
    assert len(package.agents) == agents
    assert sum(len(w.graph.nodes) for w in package.workflows) == nodes
    for wf in package.workflows:
        assert set(wf.steps) == {n.id for n in wf.graph.nodes}
        for node in wf.graph.nodes:
            assert (package.root / node.file).is_file()
            assert wf.steps[node.id].frontmatter["nodeId"] == node.id


def test_example_create_story_details() -> None:
    package = load_package(EXAMPLES / "create-story-micro")
    wf = package.default_workflow
    assert wf.workflow_path == "workflow.md" and wf.graph_path == "workflow.graph.json"
    assert wf.graph.entryNodeId == "step-01-select-story"
    assert wf.graph.node("end-99").agentId == "summarizer"
    assert package.workflow_by_path("@pkg/workflow.md") is wf
    assert package.agent("sm").menu[0].workflow == "workflow.md"


def test_minimal_package_model(tmp_path: Path) -> None:
    package = load_package(make_package(tmp_path / "mini"))
    assert (package.id, package.name, package.version) == ("mini", "mini", "1.0.0")
    assert package.description == "A tiny package for tests."
    assert package.root == (tmp_path / "mini").resolve()
    assert package.manifest["entry"]["agents"] == "agents.json"
    wf = package.workflows[0]
    assert wf.id == "mini" and wf.display_name == "Mini Workflow"
    assert wf.description == "A tiny package for tests."
    assert wf.template.startswith("---\nschemaVersion")
    assert [e.to for e in wf.graph.outgoing("decide-02")] == ["step-03a", "step-03b"]
    step = wf.step("decide-02")
    assert step is not None and step.path == "steps/decide-02.md"
    assert step.frontmatter["type"] == "decision"
    assert step.body.lstrip().startswith("# Decide")
    assert step.text == (tmp_path / "mini/steps/decide-02.md").read_text(encoding="utf-8")
    guide = package.agent("guide")
    assert guide is not None
    assert guide.persona.principle_lines() == ["Be brief.", "Ask only when needed."]
    assert guide.menu[1].cmd == "*by-id" and guide.menu[3].ide_only is True
    assert package.agent("helper").tools.fs.maxReadBytes == 1000


def test_multi_workflow_entry_record_comes_first(tmp_path: Path) -> None:
    package = load_package(make_multi_package(tmp_path / "multi"))
    assert [w.id for w in package.workflows] == ["alpha", "beta"]
    assert package.default_workflow.display_name == "Alpha"
    beta = package.workflow("beta")
    assert beta.graph.node("step-01").file == "workflows/beta/steps/step-01.md"
    assert package.workflow_by_path("{package-root}/workflows/beta/workflow.md") is beta


def test_entry_outside_the_index_is_runnable_under_the_package_name(tmp_path: Path) -> None:
    root = make_package(tmp_path / "both")
    shutil.copytree(root / "steps", root / "workflows/extra/nodes")
    shutil.copy(root / "workflow.md", root / "workflows/extra/workflow.md")
    shutil.copy(root / "workflow.graph.json", root / "workflows/extra/workflow.graph.json")
    edit_json(root / "workflows/extra/workflow.graph.json",
              lambda g: [n.update(file=n["file"].replace("steps/", "nodes/")) for n in g["nodes"]])
    edit_json(root / "bmad.json", lambda m: m.update(workflows=[
        {"id": "extra", "workflow": "workflows/extra/workflow.md", "graph": "workflows/extra/workflow.graph.json"}]))
    package = load_package(root)
    assert [w.id for w in package.workflows] == ["mini", "extra"]
    # node files written relative to the graph's folder still resolve, and are rewritten root-relative
    assert package.workflow("extra").graph.node("end-99").file == "workflows/extra/nodes/end-99.md"
    assert package.workflow("extra").steps["end-99"].path == "workflows/extra/nodes/end-99.md"


def test_entry_name_clashing_with_a_record_id_is_an_error(tmp_path: Path) -> None:
    root = make_multi_package(tmp_path / "multi")
    edit_json(root / "bmad.json", lambda m: m.update(name="beta", entry={**m["entry"], "graph": "workflows/beta/workflow.graph.json"}))
    with pytest.raises(PackageInvalid) as info:
        load_package(root)
    assert any(p.json_path == "$.entry" and "derived id 'beta'" in p.message for p in info.value.problems)


def test_empty_dates_in_templates_read_as_absent(tmp_path: Path) -> None:
    root = make_package(tmp_path / "mini")
    log = '\ndecisionLog:\n  - {from: "decide-02", to: "step-03b", label: "b", decidedAt: ""}\n'
    text = template_text("mini", "step-01", updated_at='""').replace("decisionLog: []\n", log.lstrip("\n"))
    (root / "workflow.md").write_text(text, encoding="utf-8")
    package, problems = validate_path(root)
    assert package is not None and problems == []


def test_decision_with_one_branch_is_only_a_warning(tmp_path: Path) -> None:
    root = make_package(tmp_path / "mini")
    edit_json(root / "workflow.graph.json", lambda g: g["edges"].pop(1))
    package, problems = validate_path(root)
    assert package is not None
    assert [(p.level, p.file, p.json_path) for p in problems] == [("warning", "workflow.graph.json", "$.nodes[1]")]
    assert "1 outgoing edge" in problems[0].message


def test_zip_loads_into_the_cache_once(tmp_path: Path) -> None:
    src = make_package(tmp_path / "mini")
    archive = pack_package(src, tmp_path / "out" / "mini.bmad")
    cache = tmp_path / "cache"
    first = load_package(archive, cache_dir=cache)
    second = load_package(archive, cache_dir=cache)
    assert first.root == second.root
    assert first.root.parent == cache and first.root.name.startswith("mini-")
    assert len(first.root.name) == len("mini-") + 12
    assert [p.name for p in cache.iterdir()] == [first.root.name]  # no leftover temp dirs
    direct = load_package(src)
    assert first.workflows[0].steps.keys() == direct.workflows[0].steps.keys()
    assert all(first.workflows[0].steps[k].text == direct.workflows[0].steps[k].text for k in direct.workflows[0].steps)


def test_zip_of_a_folder_finds_the_package_inside(tmp_path: Path) -> None:
    src = make_package(tmp_path / "mini")
    archive = zip_entries(tmp_path / "wrapped.bmad", package_entries(src, prefix="mini/"))
    package = load_package(archive, cache_dir=tmp_path / "cache")
    assert package.root.name == "mini" and package.workflows[0].id == "mini"


def test_zip_without_cache_dir_uses_a_temp_dir(tmp_path: Path) -> None:
    archive = pack_package(make_package(tmp_path / "mini"), tmp_path / "mini.bmad")
    package = load_package(archive)
    try:
        assert not package.root.is_relative_to(tmp_path)
        assert json.loads((package.root / "bmad.json").read_text())["name"] == "mini"
    finally:
        assert package.root.parent.name.startswith("crewagent-pkg-")
        shutil.rmtree(package.root.parent, ignore_errors=True)
