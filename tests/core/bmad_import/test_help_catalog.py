"""The help catalog becomes next-steps.json, read in each BMAD generation's own columns, and the
loader reads it back (checked), so a completed run can offer the step that follows it.

The real BMAD-METHOD trees are read in place from ../shared/fixtures; those tests skip, saying which
tree is missing, when they are absent.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from crewagent.core.bmad_import import import_bmad
from crewagent.core.bmad_import.writer import write_package
from crewagent.core.package.loader import load_package
from crewagent.core.package.next_steps import NEXT_STEPS_FILE
from crewagent.core.package.validate import PackageInvalid
from tests.support.bmad_trees import BMAD_V6_SRC, BMAD_V62_SRC, BMAD_V611_SRC, story_cycle_bmad
from tests.support.shared_files import needs


def steps_of(tree: Path) -> dict[str, list[tuple[str, str | None, bool]]]:
    doc = json.loads(import_bmad(tree).files[NEXT_STEPS_FILE])
    return {s["workflow"]: [(n["workflow"], n["agent"], n["back"]) for n in s["next"]] for s in doc["steps"]}


@pytest.mark.parametrize("tree", [
    pytest.param(BMAD_V6_SRC, marks=needs(BMAD_V6_SRC), id="v6.0-phase-sequence"),
    pytest.param(BMAD_V62_SRC, marks=needs(BMAD_V62_SRC), id="v6.2-phase-sequence-skills"),
])
def test_phase_and_sequence_catalogs_give_the_story_cycle(tree: Path) -> None:
    steps = steps_of(tree)
    assert steps["create-story"] == [("dev-story", "dev", False)]
    assert ("code-review", "dev", False) in steps["dev-story"]
    assert steps["code-review"][0] == ("dev-story", "dev", True), "a review sends the story back to dev first"
    assert ("create-story", "sm", False) in steps["code-review"]
    assert ("create-story", "sm", False) in steps["sprint-planning"]


@needs(BMAD_V611_SRC)
def test_preceded_by_and_followed_by_catalogs() -> None:
    steps = steps_of(BMAD_V611_SRC)
    assert steps["build"][0] == ("code-review", "dev", False)  # followed-by
    assert ("qa-generate-e2e-tests", "dev", False) in steps["build"]  # QA's preceded-by: bmad-build
    assert steps["sprint-planning"] == [("build", "dev", False)]  # Build's preceded-by


AFTER_BEFORE = """\
module,skill,display-name,menu-code,description,action,args,phase,after,before,required,output-location,outputs
cycle,bmad-create-story,Create Story,CS,Draft the next story,create,,4-implementation,,bmad-dev-story,true,,
cycle,bmad-create-story,Validate Story,VS,Check a story,validate,,4-implementation,bmad-create-story:create,,false,,
cycle,bmad-dev-story,Dev Story,DS,Build it,,,4-implementation,,,true,,
cycle,bmad-code-review,Code Review,CR,Review it,,,4-implementation,bmad-dev-story,,false,,
"""


def test_after_and_before_catalogs(tmp_path: Path) -> None:
    """The generation between: `before` names what follows a row, `after` what it follows; a skill of
    the tree is named by its folder (`bmad-dev-story` is the dev-story workflow)."""
    root = story_cycle_bmad(tmp_path, catalog=AFTER_BEFORE)
    for workflow in ("create-story", "dev-story", "code-review"):
        old, new = root / "cycle/workflows" / workflow, root / "cycle/workflows" / f"bmad-{workflow}"
        old.rename(new)
    text = root / "cycle/agents"
    for agent in text.iterdir():
        agent.write_text(agent.read_text().replace("workflows/", "workflows/bmad-"))
    steps = steps_of(root)
    assert steps == {"create-story": [("dev-story", "dev", False)], "dev-story": [("code-review", "dev", False)]}


def test_the_package_reads_its_next_steps_back(tmp_path: Path) -> None:
    story_cycle_bmad(tmp_path / "tree")
    out = write_package(import_bmad(tmp_path / "tree" / "_bmad"), tmp_path / "pkg")
    package = load_package(out)
    assert [(s.workflow, s.agent, s.label) for s in package.next_after("create-story")] == [
        ("dev-story", "dev", "Dev Story")]
    assert [(s.workflow, s.back) for s in package.next_after("code-review")] == [
        ("dev-story", True), ("create-story", False)]


def test_a_tree_without_a_catalog_offers_nothing(tmp_path: Path) -> None:
    story_cycle_bmad(tmp_path / "tree", catalog=None)
    result = import_bmad(tmp_path / "tree" / "_bmad")
    assert NEXT_STEPS_FILE not in result.files
    package = load_package(write_package(result, tmp_path / "pkg"))
    assert package.next_steps is None and package.next_after("create-story") == []


def test_a_broken_or_wrong_next_steps_file_is_a_package_problem(tmp_path: Path) -> None:
    story_cycle_bmad(tmp_path / "tree")
    out = write_package(import_bmad(tmp_path / "tree" / "_bmad"), tmp_path / "pkg")
    path = out / NEXT_STEPS_FILE
    doc = json.loads(path.read_text())
    doc["steps"][0]["next"][0]["workflow"] = "deploy"
    path.write_text(json.dumps(doc))
    with pytest.raises(PackageInvalid) as caught:
        load_package(out)
    assert any(p.file == NEXT_STEPS_FILE and "'deploy'" in p.message for p in caught.value.problems)
    path.write_text("{not json")
    with pytest.raises(PackageInvalid, match="not valid JSON"):
        load_package(out)
