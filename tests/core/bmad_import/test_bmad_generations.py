"""Every BMAD v6 generation imports: v6.2 skill folders, v6.11 agent skills with customize.toml, team overrides.

The real BMAD-METHOD trees are read in place from ../shared/fixtures; each test skips, saying which
tree is missing, when they are absent (a checkout without the shared fixtures still runs the rest).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crewagent.cli.main import main
from crewagent.core.bmad_import import BmadImportError, import_bmad
from crewagent.core.base.events import RunPhase
from crewagent.core.package.loader import load_package, validate_path
from crewagent.core.package.models import Package
from crewagent.core.session.router import menu_entries, resolve
from tests.support.bmad_trees import BMAD_V6_SRC, BMAD_V62_SRC, BMAD_V611_SRC
from tests.support.bmad_walker import Move, walker
from tests.support.scripts import drive, engine_harness
from tests.support.shared_files import require

V62, V611 = BMAD_V62_SRC, BMAD_V611_SRC


def _need(tree: Path) -> None:
    require(tree)  # skips, saying which tree is missing; the layout tests with small trees still run


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for name, tree in (("v6.0", BMAD_V6_SRC), ("v6.2", V62), ("v6.11", V611)):
        if tree.is_dir():
            target = tmp_path_factory.mktemp(name.replace(".", "")) / "pkg"
            assert main(["import", "bmad", str(tree), "-o", str(target)]) == 0, name
            out[name] = target
    return out


def _package(packages: dict[str, Path], name: str, tree: Path, tmp_path: Path) -> Package:
    _need(tree)
    package, problems = validate_path(packages[name], cache_dir=tmp_path)
    assert package is not None, [str(p) for p in problems if p.level == "error"]
    assert not [str(p) for p in problems], f"{name}: validate finds nothing to fix in an import"
    return package


def _unavailable(package: Package) -> list[tuple[str, str, str]]:
    return [(a.id, i.description, str(getattr(i, "unavailable", ""))) for a in package.agents for i in a.menu
            if getattr(i, "unavailable", None)]


# ---- v6.2: *.agent.yaml agents, skill folders ------------------------------------------------------


def test_v62_imports_with_every_skill_item_available(packages: dict[str, Path], tmp_path: Path) -> None:
    package = _package(packages, "v6.2", V62, tmp_path)
    assert {a.metadata.name for a in package.agents} >= {"John", "Bob", "Amelia", "Winston", "Mary"}
    report = (packages["v6.2"] / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "Layout: BMAD v6.1–v6.5" in report
    assert _unavailable(package) == [] and "(0 unavailable)" in report
    for wid in ("create-story", "dev-story", "sprint-planning", "correct-course", "retrospective", "sprint-status"):
        workflow = package.workflow(wid)  # classic `<workflow>`-XML skills: one node per <step>, ids without `bmad-`
        assert workflow is not None and workflow.graph.node("step-1") is not None, wid
        assert f"skill `bmad-{wid}`" in report
    pm = package.agent("pm")
    for text in ("CP", "create-prd", "[CP]", "1", "make a prd"):
        command = resolve(pm, text, surface="web", workflows=package.workflows)
        assert (command.kind, command.workflow_id) == ("StartWorkflow", "create-prd"), text
    assert package.workflow("create-prd").graph.node("step-01-init") is not None
    dev = package.agent("dev")
    review = resolve(dev, "review my code", surface="web", workflows=package.workflows)
    assert (review.kind, review.workflow_id) == ("StartWorkflow", "code-review")
    story = resolve(package.agent("sm"), "let's write the next story", surface="web", workflows=package.workflows)
    assert story.item_label and story.item_label.startswith("[CS]")


def test_v62_skill_workflows_keep_their_steps_and_resolve_skill_paths(packages: dict[str, Path],
                                                                      tmp_path: Path) -> None:
    package = _package(packages, "v6.2", V62, tmp_path)
    review = package.workflow("code-review")
    steps = [n.id for n in review.graph.nodes if n.type != "end"]
    assert steps[:1] == ["workflow"] and {"step-01-gather-context", "step-04-present"} <= set(steps)
    report = (packages["v6.2"] / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "skill `bmad-code-review`" in report and "step-file workflow" in report
    prd = package.workflow("create-prd")  # "Invoke the `bmad-party-mode` skill" becomes a nested run
    refs = {prd.step(n.id).frontmatter["subworkflowRef"] for n in prd.graph.nodes if n.type == "subworkflow"}
    assert {"party-mode", "advanced-elicitation"} <= refs


async def test_v62_step_offering_party_mode_runs_it_nested(packages: dict[str, Path], project: Path) -> None:
    _need(V62)
    async with engine_harness(project) as h:
        package = load_package(packages["v6.2"], cache_dir=h.store.packages_dir)
        visited: list[str] = []
        taken: list[str] = []

        def once(node: str, moves: list[Move]) -> Move | None:  # the first step offering Party Mode takes it
            pick = next((m for m in moves if m.type == "subworkflow" and "party-mode" in m.to), None)
            if pick is None or taken:
                return None
            taken.append(pick.to)
            return pick

        h.llm.responder = walker(once, visited=visited)
        results = await drive(h.engine, h.create(package, "create-prd"), package)
    assert results[-1].phase is RunPhase.COMPLETED, results[-1].error
    party = package.workflow("party-mode")
    own = {n.id for n in party.graph.nodes} - {n.id for n in package.workflow("create-prd").graph.nodes}
    assert taken and own & set(visited)  # the child's own steps ran, then the PRD went on to its end
    assert package.workflow("create-prd").graph.node(visited[-1]).type == "end"


# ---- v6.11: agents as skills ------------------------------------------------------------------------


def test_v611_agents_come_from_customize_toml_with_every_item_available(packages: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    package = _package(packages, "v6.11", V611, tmp_path)
    assert _unavailable(package) == []
    dev = package.agent("dev")
    assert (dev.metadata.name, dev.metadata.title, dev.metadata.icon) == ("Amelia", "Senior Software Engineer", "💻")
    assert dev.persona.communication_style.startswith("Ultra-succinct")
    assert "No task complete without passing tests." in dev.persona.principle_lines()
    assert any("@project/**/project-context.md" in a for a in dev.critical_actions or [])
    assert [i.trigger for i in dev.menu][:3] == ["BD or fuzzy match on build",
                                                "QA or fuzzy match on qa-generate-e2e-tests",
                                                "CR or fuzzy match on code-review"]
    for text, workflow in {"CR": "code-review", "cr": "code-review", "SP": "sprint-planning",
                           "review my code": "code-review", "sprint planning": "sprint-planning"}.items():
        command = resolve(dev, text, surface="web", workflows=package.workflows)
        assert (command.kind, command.workflow_id) == ("StartWorkflow", workflow), text
    analyst = package.agent("analyst")  # a prompt that invokes a skill runs its workflow, the prompt as context
    market = resolve(analyst, "MR", surface="web", workflows=package.workflows)
    assert (market.kind, market.workflow_id) == ("StartWorkflow", "deep-recon") and market.data is not None
    context = (packages["v6.11"] / "_bmad/_menu/analyst-mr.md").read_text(encoding="utf-8")
    assert "market research type pre-selected" in context
    report = (packages["v6.11"] / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "Layout: BMAD v6.6+" in report and "(0 unavailable)" in report


def test_v611_skill_texts_are_resolved_at_import(packages: dict[str, Path], tmp_path: Path) -> None:
    package = _package(packages, "v6.11", V611, tmp_path)
    story = package.workflow("create-story")
    body = story.step(story.graph.entryNodeId).body
    assert "resolve_customization.py" not in body and "If the script fails" not in body
    assert "## Customization (resolved at import)" in body and "project-context.md" in body
    assert "@project/_bmad-output/implementation-artifacts/sprint-status.yaml" in body
    planning = package.workflow("sprint-planning")
    assert [n.type for n in planning.graph.nodes] == ["step", "end"]  # one SKILL.md: one step
    report = (packages["v6.11"] / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "nothing from the BMAD tree is executed" not in report  # scripts are carried: see test_bmad_scripts.py


# ---- runs: create-prd and the implementation phase -------------------------------------------------------


@pytest.mark.parametrize(("generation", "workflows"), [
    ("v6.2", ("create-prd", "code-review", "create-story", "dev-story", "sprint-planning")),
    ("v6.11", ("create-story", "dev-story", "code-review", "sprint-planning", "prd", "create-prd")),
])
async def test_planning_and_implementation_workflows_run_to_completion(
        packages: dict[str, Path], project: Path, generation: str, workflows: tuple[str, ...]) -> None:
    _need(V62 if generation == "v6.2" else V611)
    async with engine_harness(project) as h:
        package = load_package(packages[generation], cache_dir=h.store.packages_dir)
        ids = {w.id for w in package.workflows}
        for wid in workflows:
            assert wid in ids, f"{wid} was not imported"
            workflow = package.workflow(wid)
            visited: list[str] = []
            h.llm.responder = walker(visited=visited)
            results = await drive(h.engine, h.create(package, wid), package)
            assert results[-1].phase is RunPhase.COMPLETED, (wid, results[-1].error)
            assert visited[0] == workflow.graph.entryNodeId and workflow.graph.node(visited[-1]).type == "end"


# ---- team customizations ---------------------------------------------------------------------------


def test_team_override_changes_persona_replaces_and_adds_menu_items(tmp_path: Path) -> None:
    _need(V611)
    custom = tmp_path / "custom"
    custom.mkdir()
    (custom / "bmad-agent-dev.toml").write_text(
        '[agent]\nicon = "🦊"\ncommunication_style = "Warm and thorough; explains every finding."\n'
        'principles = ["Every review names the file and line."]\n'
        '[[agent.menu]]\ncode = "CR"\ndescription = "Review the change against our team checklist"\n'
        'skill = "bmad-code-review"\n'
        '[[agent.menu]]\ncode = "RN"\ndescription = "Draft release notes for the sprint"\n'
        'prompt = "Write release notes from the stories marked done."\n', encoding="utf-8")
    (custom / "bmad-agent-dev.user.toml").write_text('[agent]\nicon = "🐙"\n', encoding="utf-8")
    (custom / "bmad-create-story.toml").write_text(
        '[workflow]\npersistent_facts = ["Our stories are written in Gherkin."]\n', encoding="utf-8")
    out = tmp_path / "pkg"
    assert main(["import", "bmad", str(V611), "-o", str(out), "--custom", str(custom)]) == 0
    package = load_package(out, cache_dir=tmp_path / "cache")
    dev = package.agent("dev")
    assert dev.metadata.icon == "🦊" and dev.persona.communication_style.startswith("Warm and thorough")
    principles = dev.persona.principle_lines()
    assert principles[0] == "No task complete without passing tests." and principles[-1].startswith("Every review")
    codes = [i.description.split("]")[0].strip("[") for i in dev.menu]
    assert codes == ["BD", "QA", "CR", "SP", "ER", "RN"]  # CR replaced in place, RN appended
    cr = dev.menu[2]
    assert cr.description == "[CR] Review the change against our team checklist" and cr.workflow == "code-review"
    rn = resolve(dev, "RN", surface="web", workflows=package.workflows)
    assert rn.kind != "Refused" and dev.prompt(dev.menu[5].action[1:]) is not None
    story = package.workflow("create-story").step("skill").body
    assert "Our stories are written in Gherkin." in story and "project-context.md" in story  # arrays append
    report = (out / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "custom/bmad-agent-dev.toml` applied to `bmad-agent-dev`" in report
    assert "persona and menu from `customize.toml` `[agent]` with the team's overrides" in report
    assert "bmad-agent-dev.user.toml" in report and "personal override" in report


def test_installed_custom_folder_applies_and_broken_toml_is_reported(tmp_path: Path) -> None:
    root = _agent_skill_tree(tmp_path / "project")
    (root / "custom").mkdir()
    (root / "custom/bmad-agent-sm.toml").write_text('[agent]\ncommunication_style = "Brisk."\n', encoding="utf-8")
    (root / "custom/bmad-story.toml").write_text('[workflow]\nactivation_steps_append = ["Say hi\n', encoding="utf-8")
    result = import_bmad(tmp_path / "project")
    agents = json.loads(str(result.files["agents.json"]))["agents"]
    assert agents[0]["persona"]["communication_style"] == "Brisk."
    assert agents[0]["menu"][0]["workflow"] == "story"
    report = str(result.files["IMPORT-REPORT.md"])
    assert "_bmad/custom/bmad-story.toml" in report and "not valid TOML: line 2" in report
    assert "workflows/story/workflow.md" in result.files  # the rest went on


def test_a_tree_of_no_known_layout_says_what_it_looked_for(tmp_path: Path) -> None:
    tree = tmp_path / "src" / "bmm"
    (tree / "workflows").mkdir(parents=True)
    (tree / "module.yaml").write_text("code: bmm\n", encoding="utf-8")
    with pytest.raises(BmadImportError, match=r"no BMAD agents found; looked for `\*\.agent\.yaml` agents"):
        import_bmad(tmp_path / "src")


def test_broken_agent_toml_is_left_out_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = _agent_skill_tree(tmp_path / "project")
    extra = root / "bmm/agents/bmad-agent-qa"
    extra.mkdir(parents=True)
    (extra / "SKILL.md").write_text("---\nname: bmad-agent-qa\n---\n# Quinn\n", encoding="utf-8")
    (extra / "customize.toml").write_text('[agent]\nname = "Quinn"\nicon = \n', encoding="utf-8")
    out = tmp_path / "pkg"
    assert main(["import", "bmad", str(tmp_path / "project"), "-o", str(out)]) == 0
    report = (out / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "bmm/agents/bmad-agent-qa/customize.toml" in report and "line 3" in report
    assert [a.id for a in load_package(out, cache_dir=tmp_path / "c").agents] == ["sm"]


def test_menu_shows_the_unavailable_reason_once(packages: dict[str, Path], tmp_path: Path) -> None:
    package = _package(packages, "v6.2", V62, tmp_path)
    for agent in package.agents:
        for entry in menu_entries(agent, "web"):
            if entry.unavailable:
                assert "unavailable here" not in entry.label and entry.unavailable not in entry.label


def _agent_skill_tree(project: Path) -> Path:
    """An installed v6.6-style `_bmad/`: one agent skill with a customize.toml, one single-file skill."""
    root = project / "_bmad"
    files = {
        "core/config.yaml": "user_name: Ada\ncommunication_language: English\noutput_folder: '{project-root}/out'\n",
        "bmm/config.yaml": "implementation_artifacts: '{project-root}/out/impl'\n",
        "bmm/agents/bmad-agent-sm/SKILL.md": "---\nname: bmad-agent-sm\ndescription: Scrum master\n---\n"
                                             "# Bob — Scrum Master\n\n## Overview\n\nYou are Bob.\n",
        "bmm/agents/bmad-agent-sm/customize.toml": '[agent]\nname = "Bob"\ntitle = "Scrum Master"\nicon = "🏃"\n'
                                                   'role = "Story preparer"\nidentity = "Agile coach"\n'
                                                   'communication_style = "Crisp."\nprinciples = ["Clarity."]\n'
                                                   '[[agent.menu]]\ncode = "CS"\ndescription = "Write the next '
                                                   'story"\nskill = "bmad-story"\n',
        "bmm/skills/bmad-story/SKILL.md": "---\nname: bmad-story\ndescription: Write a story\n---\n# Story\n\n"
                                          "1. Resolve: `uv run {project-root}/_bmad/scripts/resolve_customization.py "
                                          "--skill {skill-root} --key workflow`\n2. Follow `references/guide.md`.\n"
                                          "3. Write `{implementation_artifacts}/story.md`.\n",
        "bmm/skills/bmad-story/references/guide.md": "# Guide\n\nKeep stories small.\n",
        "bmm/skills/bmad-story/customize.toml": "[workflow]\nactivation_steps_append = []\n",
    }
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_broken_agent_yaml_is_reported_with_its_line_and_the_rest_imports(tmp_path: Path) -> None:
    root = _agent_skill_tree(tmp_path / "project")
    (root / "bmm/agents/old.agent.yaml").write_text("agent:\n  metadata:\n    name: [Old\n", encoding="utf-8")
    result = import_bmad(tmp_path / "project")
    report = str(result.files["IMPORT-REPORT.md"])
    assert "`bmm/agents/old.agent.yaml`: not valid YAML at line 4" in report and "fix that line" in report
    assert [a["id"] for a in json.loads(str(result.files["agents.json"]))["agents"]] == ["sm"]


def test_installed_v66_project_with_skills_in_the_tool_folder(tmp_path: Path) -> None:
    """v6.6+ installs skills where the coding tool reads them (`.claude/skills/`); `_bmad/` keeps config.toml."""
    tree = _agent_skill_tree(tmp_path / "src-tree")
    project = tmp_path / "project"
    skills = project / ".claude/skills"
    skills.mkdir(parents=True)
    for folder in ("bmm/agents/bmad-agent-sm", "bmm/skills/bmad-story"):
        (tree / folder).rename(skills / folder.rsplit("/", 1)[-1])
    bmad = project / "_bmad"
    (bmad / "custom").mkdir(parents=True)
    (bmad / "config.toml").write_text('[core]\nuser_name = "Ada"\noutput_folder = "{project-root}/out"\n'
                                      '[modules.bmm]\nimplementation_artifacts = "{project-root}/out/impl"\n',
                                      encoding="utf-8")
    (bmad / "custom/config.toml").write_text('[core]\nuser_name = "Team Crew"\n', encoding="utf-8")
    (bmad / "custom/config.user.toml").write_text('[core]\nuser_name = "Just Me"\n', encoding="utf-8")
    out = tmp_path / "pkg"
    assert main(["import", "bmad", str(project), "-o", str(out)]) == 0
    package = load_package(out, cache_dir=tmp_path / "cache")
    assert [a.id for a in package.agents] == ["sm"]
    body = package.workflow("story").step("skill").body
    assert "@project/out/impl/story.md" in body and "@pkg/_bmad/skills/bmad-story/references/guide.md" in body
    assert "resolve_customization.py" not in body
    assert "user_name: Team Crew" in (out / "_bmad/core/config.yaml").read_text(encoding="utf-8")
    report = (out / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "config.user.toml" in report and "personal override" in report


def test_v611_skill_files_are_carried_and_bare_paths_resolve_from_the_skill_root(packages: dict[str, Path],
                                                                                 tmp_path: Path) -> None:
    _package(packages, "v6.11", V611, tmp_path)
    out = packages["v6.11"]
    assert (out / "_bmad/bmm/plan/bmad-prd/assets/prd-template.md").is_file()
    validate = (out / "_bmad/bmm/plan/bmad-prd/references/headless.md").read_text(encoding="utf-8")
    assert "@pkg/_bmad/bmm/plan/bmad-prd/references/validate.md" in validate  # `references/validate.md` as written
    report = (out / "IMPORT-REPORT.md").read_text(encoding="utf-8")
    assert "bmad-prd/assets/" not in report.split("## Left out")[1].split("## Files")[0]


@pytest.mark.parametrize(("generation", "agent", "text", "code"), [
    ("v6.0", "sm", "let's write the next story", "CS"),
    ("v6.0", "dev", "review my code", "CR"),
    ("v6.0", "pm", "CP", "CP"),
    ("v6.2", "sm", "let's write the next story", "CS"),
    ("v6.2", "dev", "DS", "DS"),
    ("v6.2", "dev", "review my code", "CR"),
    ("v6.11", "dev", "review my code", "CR"),
    ("v6.11", "pm", "PRD", "PRD"),
    ("v6.11", "pm", "let's write the prd", "PRD"),
])
def test_routing_on_the_real_menus_of_every_generation(packages: dict[str, Path], tmp_path: Path, generation: str,
                                                       agent: str, text: str, code: str) -> None:
    _need({"v6.0": BMAD_V6_SRC, "v6.2": V62, "v6.11": V611}[generation])
    package = load_package(packages[generation], cache_dir=tmp_path)
    command = resolve(package.agent(agent), text, surface="web", workflows=package.workflows)
    assert command.item_label and command.item_label.startswith(f"[{code}]"), (text, command)
    assert command.kind == "StartWorkflow", (text, command)


def test_v61_layout_skill_refs_and_xml_workflow_paths(tmp_path: Path) -> None:
    """v6.1: an agent names a skill (`skill:bmad-plan`) and a classic `<workflow>`-XML workflow.md by path."""
    src = tmp_path / "src"
    files = {
        "bmm/module.yaml": "code: bmm\nname: Method\n",
        "bmm/agents/sm.agent.yaml": (
            "agent:\n  metadata: {name: Bob, title: Scrum Master, icon: '🏃'}\n"
            "  persona: {role: r, identity: i, communication_style: c, principles: p}\n  menu:\n"
            "    - trigger: CS or fuzzy match on create-story\n"
            "      exec: '{project-root}/_bmad/bmm/workflows/create-story/workflow.md'\n"
            "      description: '[CS] Create Story'\n"
            "    - trigger: PL or fuzzy match on plan\n      exec: 'skill:bmad-plan'\n      description: '[PL] Plan'\n"),
        "bmm/workflows/create-story/workflow.md": "---\nname: create-story\n---\n# Create Story\n\n<workflow>\n"
                                                  '<step n="1" goal="Pick"><action>Pick one</action></step>\n'
                                                  "</workflow>\n",
        "bmm/workflows/bmad-plan/SKILL.md": "---\nname: bmad-plan\ndescription: Plan it\n---\nFollow ./workflow.md\n",
        "bmm/workflows/bmad-plan/workflow.md": "# Plan\n\nRead fully and follow `./steps/step-01-start.md`.\n",
        "bmm/workflows/bmad-plan/steps/step-01-start.md": "# Start\n\nWrite the plan.\n",
    }
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text, encoding="utf-8")
    out = tmp_path / "pkg"
    assert main(["import", "bmad", str(src), "-o", str(out)]) == 0
    package, problems = validate_path(out, cache_dir=tmp_path / "c")
    assert package is not None and not problems
    sm = package.agent("sm")
    assert resolve(sm, "PL", surface="web", workflows=package.workflows).workflow_id == "plan"
    story = resolve(sm, "CS", surface="web", workflows=package.workflows)  # the XML workflow.md named by path
    assert (story.kind, story.workflow_id) == ("StartWorkflow", "create-story")
    assert [n.id for n in package.workflow("create-story").graph.nodes] == ["start", "step-1", "end"]
    assert "Layout: BMAD v6.1–v6.5" in (out / "IMPORT-REPORT.md").read_text(encoding="utf-8")


def test_broken_module_config_is_reported_and_the_import_goes_on(tmp_path: Path) -> None:
    root = _agent_skill_tree(tmp_path / "project")
    (root / "bmm/config.yaml").write_text("implementation_artifacts: [out\n", encoding="utf-8")
    result = import_bmad(tmp_path / "project")
    report = str(result.files["IMPORT-REPORT.md"])
    assert "`bmm/config.yaml`: not valid YAML at line 2" in report
    assert "workflows/story/workflow.md" in result.files
