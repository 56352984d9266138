"""`crewagent import bmad`: BMAD v6 trees in, a valid v1.1 package out, with a report that hides nothing."""

from __future__ import annotations

import json
import re
import zipfile
from pathlib import Path

import pytest

from crewagent.cli.main import main
from crewagent.core.bmad_import import import_bmad
from crewagent.core.base.events import RunPhase
from crewagent.core.base.frontmatter import parse as parse_frontmatter
from crewagent.core.package.loader import load_package, validate_path
from crewagent.core.session.router import resolve
from tests.support.bmad_trees import BMAD_V6_SRC, installed_bmad, needs_bmad_v6
from tests.support.bmad_walker import walker
from tests.support.scripts import drive, engine_harness
from tests.support.shared_files import require


@pytest.fixture(scope="module")
def bmm_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require(BMAD_V6_SRC)
    out = tmp_path_factory.mktemp("import") / "bmm.bmad"
    assert main(["import", "bmad", str(BMAD_V6_SRC), "-o", str(out)]) == 0
    return out


def _archive_text(archive: Path, name: str) -> str:
    with zipfile.ZipFile(archive) as zf:
        return zf.read(name).decode("utf-8")


# ---- the real BMAD v6 tree -------------------------------------------------------------------


@needs_bmad_v6
def test_bmm_import_validates_with_all_agents_and_menu_items(bmm_package: Path, tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    package, problems = validate_path(bmm_package, cache_dir=tmp_path)
    assert package is not None, [str(p) for p in problems if p.level == "error"]
    assert not [str(p) for p in problems], "an import leaves nothing to fix"
    assert len(package.agents) == 10
    assert sum(len(a.menu) for a in package.agents) == 33
    assert {a.metadata.name for a in package.agents} >= {"John", "Mary", "Winston", "Bob", "Paige", "BMad Master"}
    assert len(package.workflows) == 25  # 16 step-file workflows and 9 classic ones
    pm = package.agent("pm")
    assert pm is not None and pm.menu[0].trigger == "CP or fuzzy match on create-prd"
    assert pm.persona.principle_lines()[0].startswith("Channel expert product manager thinking")
    assert package.agent("qa").prompt("welcome") is not None  # prompts kept
    assert package.agent("dev").critical_actions  # critical actions kept
    unavailable = [(a.id, i) for a in package.agents for i in a.menu if getattr(i, "unavailable", None)]
    assert unavailable == []
    ids = {w.id for w in package.workflows}
    assert {"sprint-planning", "create-story", "dev-story", "code-review", "correct-course", "retrospective",
            "document-project", "qa-automate", "sprint-status"} <= ids
    for item in (i for a in package.agents for i in a.menu if i.workflow or i.exec):
        assert (item.workflow or item.exec) in ids | {w.workflow_path for w in package.workflows}, item
    report = _archive_text(bmm_package, "IMPORT-REPORT.md")
    assert "(0 unavailable)" in report and "UNAVAILABLE" not in report
    assert "advanced-elicitation/workflow.xml" in report  # a task-style XML workflow: still left out, with why
    assert "document-project/instructions.md, line 80" in report  # its malformed XML, with the line
    assert "bmm/teams/" in report  # unused files are listed, not dropped silently


@needs_bmad_v6
def test_import_prints_a_summary_and_keeps_the_report_in_the_package(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "pkg"
    assert main(["import", "bmad", str(BMAD_V6_SRC), "-o", str(out), "--set", "user_name=Ada"]) == 0
    printed = capsys.readouterr().out
    report = (out / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert report.startswith("# Import report: bmm 6.0.0") and "# Import report" not in printed
    assert len(printed.splitlines()) <= 12
    assert printed.startswith(f"Imported bmm 6.0.0 from a BMAD source tree into {out}\n")
    assert "10 agents, 33 menu items (0 unavailable), 25 workflows" in printed
    # project_name has no default in a source tree: the exact command that sets it, with what was typed
    assert (f"  crewagent import bmad {BMAD_V6_SRC} -o {out} --force --set user_name=Ada --set project_name=…\n"
            in printed)
    assert f"crewagent chat {out} --project DIR" in printed and f"IMPORT-REPORT.md in {out}" in printed
    assert main(["validate", str(out)]) == 0


@needs_bmad_v6
def test_pm_menu_items_start_exactly_the_workflow_they_name(bmm_package: Path, tmp_path: Path) -> None:
    package = load_package(bmm_package, cache_dir=tmp_path)
    pm = package.agent("pm")
    expected = {"1": "create-prd", "CP": "create-prd", "create-prd": "create-prd", "*create-prd": "create-prd",
                "[CP]": "create-prd", "VP": "validate-prd", "EP": "edit-prd", "IR": "check-implementation-readiness"}
    for text, workflow in expected.items():
        command = resolve(pm, text, surface="web", workflows=package.workflows)
        assert (command.kind, command.workflow_id) == ("StartWorkflow", workflow), text
    classic = resolve(pm, "CC", surface="web", workflows=package.workflows)
    assert (classic.kind, classic.workflow_id) == ("StartWorkflow", "correct-course")


@needs_bmad_v6
def test_step_files_keep_their_frontmatter_and_point_at_packaged_files(bmm_package: Path, tmp_path: Path) -> None:
    package = load_package(bmm_package, cache_dir=tmp_path)
    prd = package.workflow("create-prd")
    step = prd.step("step-02-discovery")
    assert step.frontmatter["nextStepFile"].startswith("@pkg/_bmad/bmm/workflows/2-plan-workflows/create-prd/")
    assert step.frontmatter["outputFile"] == "@project/_bmad-output/planning-artifacts/prd.md"
    assert step.frontmatter["advancedElicitationTask"].startswith("unavailable:")
    for file in package.root.rglob("*"):  # no packaged text points at a package file that is not there
        if file.suffix in (".md", ".json", ".yaml", ".csv", ".xml"):
            for ref in re.findall(r"@pkg/[\w./{}-]+", file.read_text(encoding="utf-8")):
                assert (package.root / ref.removeprefix("@pkg/").rstrip(".")).exists(), (file.name, ref)
    init = prd.graph.outgoing("step-01-init")
    assert {e.to for e in init} == {"step-02-discovery", "step-01b-continue"}
    assert prd.graph.node("step-01-init").type == "decision"
    resume = prd.graph.outgoing("step-01b-continue")
    assert len(resume) == 13 and all(e.label.startswith("resume at") for e in resume)
    calls = [n for n in prd.graph.nodes if n.type == "subworkflow"]
    assert calls and all(prd.step(n.id).frontmatter["subworkflowRef"] in ("party-mode", "validate-prd") for n in calls)


@needs_bmad_v6
def test_set_overrides_module_defaults_in_every_step(tmp_path: Path) -> None:
    result = import_bmad(BMAD_V6_SRC, {"output_folder": "docs/ai", "project_name": "TaskNest"})
    lines = {c.key: c.mapped_to for c in result.report.config}
    assert lines["planning_artifacts"] == "`@project/docs/ai/planning-artifacts` (mount path)"
    assert lines["project_name"] == "`TaskNest` (value)"
    step = result.files["_bmad/bmm/workflows/2-plan-workflows/create-prd/steps-c/step-01-init.md"]
    assert isinstance(step, str) and "outputFile: '@project/docs/ai/planning-artifacts/prd.md'" in step
    assert "project_name: TaskNest" in str(result.files["_bmad/bmm/config.yaml"])


@needs_bmad_v6
async def test_every_imported_workflow_runs_to_completion(bmm_package: Path, project: Path) -> None:
    async with engine_harness(project) as h:
        package = load_package(bmm_package, cache_dir=h.store.packages_dir)
        for workflow in package.workflows:
            visited: list[str] = []
            h.llm.responder = walker(visited=visited)
            results = await drive(h.engine, h.create(package, workflow.id), package)
            assert results[-1].phase is RunPhase.COMPLETED, (workflow.id, results[-1].error)
            end = next(n.id for n in workflow.graph.nodes if n.type == "end")
            assert visited[0] == workflow.graph.entryNodeId and visited[-1] == end, workflow.id
            assert not any(workflow.graph.node(v).type == "subworkflow" for v in visited)


# ---- an installed _bmad/ folder ------------------------------------------------------------------


def test_installed_layout_imports_with_config_values_and_overrides(tmp_path: Path) -> None:
    installed_bmad(tmp_path / "project")
    out = tmp_path / "plans-pkg"
    assert main(["import", "bmad", str(tmp_path / "project"), "-o", str(out), "--set", "user_name=Grace"]) == 0
    package = load_package(out)
    plan = package.workflow("make-plan")
    entry = plan.step(plan.graph.entryNodeId)
    assert "Greet Grace." in entry.body and "`@pkg/_bmad/plans/config.yaml`" in entry.body
    start = plan.step("step-01-start").frontmatter
    assert start["outputFile"] == "@project/out/plans/plan.md"
    assert start["planTemplate"] == "@pkg/_bmad/plans/workflows/plan/templates/plan-template.md"
    assert (out / "_bmad/plans/workflows/plan/templates/plan-template.md").is_file()
    config = (out / "_bmad/plans/config.yaml").read_text(encoding="utf-8")
    assert "user_name: Grace" in config and "planning_artifacts: '@project/out/plans'" in config
    assert {(e.to, e.label, e.conditionText) for e in plan.graph.outgoing("step-02-choose")} == {
        ("step-03a-quick", "quick", "the step says: 1. Quick plan: load ./step-03a-quick.md"),
        ("step-03b-deep", "deep", "the step says: 2. Deep plan: load ./step-03b-deep.md")}
    assert plan.graph.node("step-02-choose").type == "decision"
    call = plan.graph.node("step-01-start.party-mode")
    assert call.type == "subworkflow" and plan.step(call.id).frontmatter["subworkflowRef"] == "party-mode"
    agent = package.agent("planner")
    assert agent.critical_actions == ["Read @pkg/_bmad/plans/data/rules.md before planning"]
    assert agent.menu[2].action == "Tell the user about @project/out/plans"
    assert agent.menu[2].ide_only is True
    manifest = (out / "_bmad/_config/agent-manifest.csv").read_text(encoding="utf-8")
    assert "planner,Pat,Planner" in manifest


def test_nothing_in_the_tree_is_dropped_silently(tmp_path: Path) -> None:
    root = installed_bmad(tmp_path / "project")
    result = import_bmad(tmp_path / "project")
    report = result.files["IMPORT-REPORT.md"]
    assert isinstance(report, str)
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = file.relative_to(root).as_posix()
        in_package = f"_bmad/{rel}" in result.files
        named = rel in report or f"{file.parent.relative_to(root).as_posix()}/" in report
        assert in_package or named, rel
    assert "plans/agents/legacy.md" in report and "compiled (markdown) agent" in report
    assert "[OL] Old Plan: the classic planner — UNAVAILABLE" in report


async def test_imported_branching_workflow_runs_the_branch_chosen(tmp_path: Path, project: Path) -> None:
    installed_bmad(tmp_path / "src")
    out = tmp_path / "plans.bmad"
    assert main(["import", "bmad", str(tmp_path / "src" / "_bmad"), "-o", str(out)]) == 0
    async with engine_harness(project) as h:
        package = load_package(out, cache_dir=h.store.packages_dir)
        visited: list[str] = []
        h.llm.responder = walker(
            lambda node, moves: next((m for m in moves if m.label == "deep"), None), visited=visited)
        results = await drive(h.engine, h.create(package, "make-plan"), package)
    assert results[-1].phase is RunPhase.COMPLETED
    assert visited == ["workflow-plan", "step-01-start", "step-02-choose", "step-03b-deep", "step-04-finish", "end"]


async def test_party_mode_call_runs_nested_and_returns(tmp_path: Path, project: Path) -> None:
    """Entering a subworkflow node runs the child workflow, then the parent continues past it."""
    installed_bmad(tmp_path / "src")
    out = tmp_path / "plans.bmad"
    assert main(["import", "bmad", str(tmp_path / "src"), "-o", str(out)]) == 0
    async with engine_harness(project) as h:
        package = load_package(out, cache_dir=h.store.packages_dir)
        visited: list[str] = []
        h.llm.responder = walker(  # Party Mode once, the first time step-01 offers it
            lambda node, moves: next((m for m in moves if m.type == "subworkflow"), None)
            if node == "step-01-start" and visited.count(node) == 1 else None,
            visited=visited)
        results = await drive(h.engine, h.create(package, "make-plan"), package)
    assert results[-1].phase is RunPhase.COMPLETED
    assert "step-01-talk" in visited  # the party-mode child ran
    assert visited.index("step-01-talk") < visited.index("step-02-choose")


def test_workflows_that_offer_each_other_are_never_nested_both_ways(tmp_path: Path) -> None:
    installed_bmad(tmp_path / "project")
    out = tmp_path / "pkg"
    assert main(["import", "bmad", str(tmp_path / "project"), "-o", str(out)]) == 0
    package = load_package(out)
    nests = {(wf.id, wf.step(n.id).frontmatter["subworkflowRef"])
             for wf in package.workflows for n in wf.graph.nodes if n.type == "subworkflow"}
    assert ("make-plan", "review-plan") in nests and ("review-plan", "make-plan") not in nests
    review = package.workflow("review-plan").step("step-01-review").body
    assert "the `make-plan` workflow this step mentions is not run from here" in review
    report = (out / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "offers `make-plan`, which leads back to `review-plan`" in report


# ---- bad input -------------------------------------------------------------------------------------


def test_bad_input_gets_a_clear_message_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    not_bmad = tmp_path / "notes"
    not_bmad.mkdir()
    (not_bmad / "README.md").write_text("hi\n", encoding="utf-8")
    assert main(["import", "bmad", str(not_bmad), "-o", str(tmp_path / "x.bmad")]) == 1
    assert "no BMAD modules found" in capsys.readouterr().err
    assert not (tmp_path / "x.bmad").exists()

    installed_bmad(tmp_path / "project")
    assert main(["import", "bmad", str(tmp_path / "project"), "-o", str(tmp_path / "o"), "--set", "oops"]) == 2
    assert "--set expects KEY=VALUE" in capsys.readouterr().err

    broken = tmp_path / "broken"
    installed_bmad(broken)
    (broken / "_bmad/plans/workflows/plan/steps/step-02-choose.md").write_bytes(b"# Choose \xff\xfe\n")
    assert main(["import", "bmad", str(broken), "-o", str(tmp_path / "b.bmad")]) == 1
    assert "plans/workflows/plan/steps/step-02-choose.md is not UTF-8 text" in capsys.readouterr().err
    assert not (tmp_path / "b.bmad").exists()

    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "mine.txt").write_text("keep me\n", encoding="utf-8")
    assert main(["import", "bmad", str(tmp_path / "project"), "-o", str(occupied), "--force"]) == 2  # bad input
    assert "not an imported package" in capsys.readouterr().err
    assert sorted(p.name for p in occupied.iterdir()) == ["mine.txt"]


def test_reimport_replaces_a_previous_import(tmp_path: Path) -> None:
    installed_bmad(tmp_path / "project")
    out = tmp_path / "pkg"
    assert main(["import", "bmad", str(tmp_path / "project"), "-o", str(out)]) == 0
    assert main(["import", "bmad", str(tmp_path / "project"), "-o", str(out), "--set", "user_name=Lin"]) == 2
    assert "user_name: Lin" not in (out / "_bmad/core/config.yaml").read_text(encoding="utf-8")  # refused, kept
    assert main(["import", "bmad", str(tmp_path / "project"), "-o", str(out), "--set", "user_name=Lin", "--force"]) == 0
    assert "user_name: Lin" in (out / "_bmad/core/config.yaml").read_text(encoding="utf-8")
    manifest = json.loads((out / "bmad.json").read_text(encoding="utf-8"))
    assert (manifest["name"], manifest["version"]) == ("plans", "6.0.0-beta.2")
    fm, _ = parse_frontmatter((out / "workflows/make-plan/workflow.md").read_text(encoding="utf-8"))
    assert fm["user_name"] == "Lin" and fm["currentNodeId"] == "workflow-plan"
