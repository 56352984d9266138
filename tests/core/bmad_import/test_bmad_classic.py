"""Classic BMAD workflows (`workflow.yaml` + instructions XML/Markdown, `<workflow>`-XML `workflow.md`)
imported as graphs, and run node by node from the terminal and in Slack against a scripted model."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from textwrap import dedent

import pytest

from crewagent.cli.main import main
from crewagent.core.bmad_import import import_bmad, write_package
from crewagent.core.bmad_import.classic import is_classic_workflow_md, plan_classic_workflow
from crewagent.core.bmad_import.config_map import build_config
from crewagent.core.bmad_import.report import ImportReport
from crewagent.core.bmad_import.source import open_source
from crewagent.core.bmad_import.step_files import workflow_files
from crewagent.core.bmad_import.step_workflows import WorkflowBuilder
from crewagent.core.base.events import RunPhase
from crewagent.core.package.loader import load_package
from tests.support.bmad_trees import BMAD_V6_SRC
from tests.support.bmad_walker import walker
from tests.support.fakes.llm_server import Reply, ScriptedLLM
from tests.support.scripts import Body, calls, current_node, drive, engine_harness, is_post_completion, node_brief, write
from tests.support.bot_harness import bot_harness, plan_tasks

BMAD_V62_SRC = BMAD_V6_SRC.parent.parent / "bmad-method-v6.2.0" / "src"
needs_v6 = pytest.mark.skipif(not BMAD_V6_SRC.is_dir(), reason=f"BMAD v6.0.0 fixture not found at {BMAD_V6_SRC}")
needs_v62 = pytest.mark.skipif(not BMAD_V62_SRC.is_dir(), reason=f"BMAD v6.2.0 fixture not found at {BMAD_V62_SRC}")


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dedent(text).lstrip("\n"), encoding="utf-8")


INSTRUCTIONS = """\
<workflow>
  <critical>The workflow execution engine is governed by: {project-root}/_bmad/core/tasks/workflow.xml</critical>
  <critical>Speak like a pirate</critical>
  <step n="1" goal="Pick the item">
    <check if="{{item}} is given">
      <action>GOTO step 3</action>
    </check>
    <ask>Which item should I note?</ask>
    <check if="user says quit">
      <action>HALT - nothing to do</action>
    </check>
  </step>
  <step n="2" goal="Look around">
    <invoke-protocol name="discover_inputs" />
    <anchor id="again" />
    <invoke-workflow path="{project-root}/_bmad/notes/workflows/helper/workflow.yaml">look closer</invoke-workflow>
  </step>
  <step n="3" goal="Write the note">
    <action>Write {{item}} into {default_output_file}</action>
    <template-output>note_body</template-output>
    <check if="the note is too short">
      <goto anchor="again" />
    </check>
  </step>
</workflow>
"""


def classic_tree(root: Path, instructions: str = INSTRUCTIONS, yaml_text: str | None = None) -> Path:
    """A source tree with one module, one agent and two classic workflows (one calls the other)."""
    src = root / "src"
    _write(src, "notes/module.yaml", """
        code: notes
        user_name: {default: Ada}
        notes_folder: {default: notes, result: "{project-root}/{value}"}
    """)
    _write(src, "notes/agents/scribe.agent.yaml", """
        agent:
          metadata: {name: Sam, title: Scribe, icon: "📝", module: notes}
          persona: {role: Scribe, identity: Writes notes., communication_style: Brief., principles: [Short notes]}
          menu:
            - trigger: NN or fuzzy match on new-note
              workflow: "{project-root}/_bmad/notes/workflows/note/workflow.yaml"
              description: "[NN] New Note"
            - trigger: HE or fuzzy match on helper
              workflow: "{project-root}/_bmad/notes/workflows/helper/workflow.yaml"
              description: "[HE] Helper"
    """)
    _write(src, "notes/workflows/note/workflow.yaml", yaml_text or """
        name: new-note
        description: "Write one note"
        config_source: "{project-root}/_bmad/notes/config.yaml"
        user_name: "{config_source}:user_name"
        notes_folder: "{config_source}:notes_folder"
        date: system-generated
        installed_path: "{project-root}/_bmad/notes/workflows/note"
        template: "{installed_path}/template.md"
        instructions: "{installed_path}/instructions.xml"
        validation: "{installed_path}/checklist.md"
        default_output_file: "{notes_folder}/{{item}}.md"
        input_file_patterns:
          ideas: {whole: "{notes_folder}/*idea*.md", load_strategy: FULL_LOAD}
    """)
    (src / "notes/workflows/note/instructions.xml").write_text(instructions, encoding="utf-8")
    _write(src, "notes/workflows/note/template.md", "# Note {{item}}\n\n{{note_body}}\n")
    _write(src, "notes/workflows/note/checklist.md", "- [ ] the note names its item\n")
    _write(src, "notes/workflows/helper/workflow.yaml", """
        name: helper
        installed_path: "{project-root}/_bmad/notes/workflows/helper"
        instructions: "{installed_path}/instructions.md"
        template: false
    """)
    _write(src, "notes/workflows/helper/instructions.md", """
        # Helper

        Some Markdown before the workflow, with a bare & and a < b comparison.

        <workflow>
        <step n="1" goal="Help">
        <action>Say hello & wave</action>
        </step>
        </workflow>
    """)
    return src


# ---- the converter on small hand-written workflows ------------------------------------------------


def test_steps_become_nodes_with_gotos_checks_halts_and_calls(tmp_path: Path) -> None:
    result = import_bmad(classic_tree(tmp_path))
    graph = json.loads(str(result.files["workflows/new-note/workflow.graph.json"]))
    nodes = {n["id"]: n["type"] for n in graph["nodes"]}
    assert nodes == {"start": "step", "step-1": "decision", "step-2": "decision", "step-3": "decision",
                     "step-2.helper": "subworkflow", "end": "end"}
    edges = {(e["from"], e["to"]): e for e in graph["edges"]}
    assert edges[("step-1", "step-2")]["isDefault"] and edges[("step-1", "step-2")]["label"] == "next"
    assert edges[("step-1", "step-3")]["conditionText"] == "{{item}} is given"  # GOTO inside <check if>
    assert edges[("step-1", "end")]["conditionText"] == "user says quit"  # HALT
    assert edges[("step-2", "step-2.helper")]["label"] == "run helper"  # invoke-workflow
    assert edges[("step-2.helper", "step-2")]["isDefault"]
    assert edges[("step-3", "step-2")]["label"] == "go to anchor again"  # <goto anchor>
    step1 = str(result.files["workflows/new-note/steps/step-1.md"])
    assert "**Ask the user** (end your turn with this question" in step1 and "Which item should I note?" in step1
    assert "GOTO step 3 (move to node `step-3`)" in step1
    assert "Speak like a pirate" in step1 and "Save after every template-output" in step1  # rules in every node
    step3 = str(result.files["workflows/new-note/steps/step-3.md"])
    assert "**Save section** (template-output): write the content for `note_body` into the output document " \
           "`@project/notes/{{item}}.md`, show the user what you wrote" in step3 and "[c] Continue, [e] Edit" in step3
    step2 = str(result.files["workflows/new-note/steps/step-2.md"])
    assert "move to node `step-2.helper`" in step2
    assert "**Run the `discover_inputs` protocol**:\n  " in step2 and "`ideas` (whole: `@project/notes/*idea*.md`" in step2
    start = str(result.files["workflows/new-note/steps/start.md"])
    assert "| `notes_folder` | @project/notes |" in start and "| `user_name` | Ada |" in start
    assert "`@pkg/_bmad/notes/workflows/note/template.md`" in start and "checklist.md" in start
    assert "workflow.xml" not in start  # the engine is this graph now
    template = str(result.files["workflows/new-note/workflow.md"])
    assert "notes_folder: '@project/notes'" in template  # the variables are in the run state
    helper = str(result.files["workflows/helper/steps/step-1.md"])
    assert "Say hello & wave" in helper  # a bare & in Markdown instructions is text
    assert "a < b comparison" in str(result.files["workflows/helper/steps/start.md"])
    assert result.report.unavailable_items == []
    assert {"_bmad/notes/workflows/note/template.md", "_bmad/notes/workflows/note/checklist.md"} <= set(result.files)
    assert "_bmad/notes/workflows/note/instructions.xml" not in result.files  # it became the nodes


async def test_invoke_workflow_runs_the_other_classic_workflow_nested(tmp_path: Path, project: Path) -> None:
    out = write_package(import_bmad(classic_tree(tmp_path)), tmp_path / "pkg")
    assert main(["validate", str(out)]) == 0
    async with engine_harness(project) as h:
        package = load_package(out, cache_dir=h.store.packages_dir)
        visited: list[str] = []
        h.llm.responder = walker(  # step 2 takes its <invoke-workflow> once, then goes on
            lambda node, moves: next((m for m in moves if m.type == "subworkflow"), None)
            if node == "step-2" and visited.count(node) == 1 else None,
            visited=visited)
        results = await drive(h.engine, h.create(package, "new-note"), package)
    assert results[-1].phase is RunPhase.COMPLETED, results[-1].error
    helper = visited.index("step-1", visited.index("step-2"))  # the helper's own step 1, run nested
    assert visited[:3] == ["start", "step-1", "step-2"] and helper < visited.index("step-3")
    assert visited.count("step-2") == 2 and visited[-1] == "end"


def test_malformed_xml_is_reported_with_its_line_and_the_rest_imports(tmp_path: Path) -> None:
    broken = INSTRUCTIONS.replace("    </check>\n    <ask>", "    <ask>", 1)  # the first <check> never closed
    result = import_bmad(classic_tree(tmp_path, broken))
    warning = next(w for w in result.report.warnings if "instructions.xml" in w)
    assert "notes/workflows/note/instructions.xml, line 11: malformed XML" in warning
    assert "close the element opened before it" in warning
    graph = json.loads(str(result.files["workflows/new-note/workflow.graph.json"]))
    assert [n["id"] for n in graph["nodes"]] == ["start", "instructions", "end"]  # one step: the whole file
    assert "<ask>Which item should I note?</ask>" in str(result.files["workflows/new-note/steps/instructions.md"])
    assert "workflows/helper/workflow.graph.json" in result.files  # the other workflow is untouched
    assert result.report.unavailable_items == []


def test_entities_are_refused_never_expanded(tmp_path: Path) -> None:
    hostile = '<!DOCTYPE w [<!ENTITY a "aaaa">]>\n' + INSTRUCTIONS.replace("Speak like a pirate", "&a;")
    result = import_bmad(classic_tree(tmp_path, hostile))
    assert any("instructions.xml, line 1: a DOCTYPE or ENTITY declaration" in w for w in result.report.warnings)
    assert "<critical>&a;</critical>" in str(result.files["workflows/new-note/steps/instructions.md"])  # as written


def test_malformed_workflow_yaml_is_left_out_with_its_line(tmp_path: Path) -> None:
    result = import_bmad(classic_tree(tmp_path, yaml_text="name: new-note\ninstructions: [unclosed\n"))
    left = next(x for x in result.report.left_out if x.item == "notes/workflows/note/workflow.yaml")
    assert "not valid YAML, line 3" in left.reason and "fix the YAML" in left.reason
    assert [(m.code, m.status) for _, m in result.report.unavailable_items] == [("NN", "unavailable")]
    assert "workflows/helper/workflow.graph.json" in result.files


def test_is_classic_workflow_md() -> None:
    assert is_classic_workflow_md('# X\n\n<workflow>\n<step n="1" goal="a">\n<action>x</action>\n</step>\n</workflow>\n')
    assert not is_classic_workflow_md("# X\n\nLoad `./steps/step-01-init.md` and follow it.\n")


@needs_v62
def test_a_v62_workflow_md_converts_directly(tmp_path: Path) -> None:
    source = open_source(BMAD_V62_SRC)
    rel = "bmm/workflows/4-implementation/bmad-create-story/workflow.md"
    assert is_classic_workflow_md(source.read(rel))
    config = build_config(source, {})
    report = ImportReport(source="src", layout=source.layout, package="bmm", version="6.2.0")
    builder = WorkflowBuilder(source, {f"{m}/config.yaml" for m in source.modules}, {rel: "create-story"}, {})
    plan = plan_classic_workflow(source, rel, builder, config, report)
    assert plan is not None and plan.id == "create-story"
    ids = [n.id for n in plan.nodes]
    assert ids[0] == "start" and ids[-1] == "end" and {"step-1", "step-5", "step-6"} <= set(ids)
    files = workflow_files(plan, builder, config, source)
    start = files["workflows/create-story/steps/start.md"]
    assert "## From the instructions" in start and "@project/_bmad-output/implementation-artifacts" in start
    # its "- `name` = `value`" lines are its variables, and the folder's template.md its template
    assert "| `default_output_file` | @project/_bmad-output/implementation-artifacts/{{story_key}}.md |" in start
    assert "create it from the template `@pkg/_bmad/bmm/workflows/4-implementation/bmad-create-story/template.md`" \
        in start
    step1 = files["workflows/create-story/steps/step-1.md"]
    assert "**Ask the user**" in step1 and "(move to node `step-2`)" in step1


# ---- the real BMAD v6.0 implementation phase, run ---------------------------------------------------


@pytest.fixture(scope="module")
def v6_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not BMAD_V6_SRC.is_dir():
        pytest.skip(f"BMAD v6.0.0 fixture not found at {BMAD_V6_SRC} (../shared/fixtures)")
    return write_package(import_bmad(BMAD_V6_SRC, {"project_name": "TaskNest"}),
                         tmp_path_factory.mktemp("classic") / "bmm")


STORY = "_bmad-output/implementation-artifacts/1-1-login.md"
# per workflow: the node that asks (answered from the input), and the node that saves the output document
SCRIPTS = {
    "create-story": ("step-1", "step-5", STORY),
    "sprint-planning": ("step-1", "step-4", "_bmad-output/implementation-artifacts/sprint-status.yaml"),
    "dev-story": ("step-1", "step-8", STORY),
    "code-review": ("step-1", "step-5", STORY),
}


def classic_responder(workflow: str, visited: list[str], briefs: dict[str, str] | None = None
                      ) -> Callable[[Body], Reply]:
    """Walks the graph's default moves; asks once at the asking node and writes once at the saving node.
    `briefs` (optional) collects the first NODE_BRIEF the model got at each node."""
    ask_node, save_node, output = SCRIPTS[workflow]
    walk = walker(visited=visited)
    done: set[str] = set()

    def respond(body: Body) -> Reply:
        node = None if is_post_completion(body) else current_node(body)
        if node is not None and briefs is not None:
            briefs.setdefault(node, node_brief(body) or "")
        if node == ask_node and "ask" not in done:
            done.add("ask")
            return Reply(content="Which story should I work on? (e.g. 1-1-login)")
        if node == save_node and "save" not in done:
            done.add("save")
            return calls(write(f"@project/{output}", f"# {workflow}\n\nStatus: ready-for-dev\n"))
        return walk(body)

    return respond


async def _cli(argv: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    return await asyncio.to_thread(main, argv)


@needs_v6
@pytest.mark.parametrize("workflow", sorted(SCRIPTS))
async def test_implementation_workflows_run_in_the_terminal(workflow: str, v6_package: Path, project: Path,
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    visited: list[str] = []
    briefs: dict[str, str] = {}
    async with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        monkeypatch.setenv("CREWAGENT_MODEL", "scripted")
        llm.responder = classic_responder(workflow, visited, briefs)
        code = await _cli(["run", str(v6_package), "--project", str(project), "--workflow", workflow],
                          "1-1-login\n", monkeypatch)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Which story should I work on?" in out  # the <ask> reached the user
    package = load_package(v6_package, cache_dir=project.parent / "cache")
    graph = package.workflow(workflow).graph
    steps = [n.id for n in graph.nodes if n.id.startswith("step-")]
    assert visited[0] == "start" and visited[-1] == "end" and steps[0] in visited
    assert (project / SCRIPTS[workflow][2]).is_file()  # the template-output / save wrote the document
    # what the model was given: the engine's rules and resolved variables first, then each step's own text
    assert "Save after every template-output" in briefs["start"]
    assert "| `implementation_artifacts` | @project/_bmad-output/implementation-artifacts |" in briefs["start"]
    assert all("## Engine rules" in briefs[s] for s in steps if s in briefs)
    assert "{config_source}" not in briefs[steps[0]] and "{project-root}" not in briefs[steps[0]]


@needs_v6
async def test_create_story_runs_in_a_slack_thread(v6_package: Path, project: Path) -> None:
    visited: list[str] = []
    async with bot_harness(project, packages=(str(v6_package),)) as h:
        h.llm.responder = classic_responder("create-story", visited)
        top = await h.mention("create-story")
        question = await h.posted_text("Which story should I work on?")
        assert question["thread_ts"] == top
        status = await h.wait_status(top, "Waiting for your reply")
        tasks = plan_tasks(status)  # the plan shows the classic steps as its tasks
        assert tasks["start"]["status"] == "complete" and tasks["step-1"]["status"] == "in_progress"
        assert tasks["step-6"]["status"] == "pending"
        mark = h.mark()
        await h.reply(top, "1-1-login")
        await h.posted_text("completed.", since=mark)
        await h.settle()
    assert visited[0] == "start" and visited[-1] == "end"
    assert (project / STORY).is_file()


@needs_v6
def test_v6_classic_graphs_follow_their_instructions(v6_package: Path, tmp_path: Path) -> None:
    package = load_package(v6_package, cache_dir=tmp_path)
    status = package.workflow("sprint-status").graph
    assert {e.to for e in status.outgoing("step-0")} == {"step-1", "step-20", "step-30"}  # modes by goto
    assert [e.to for e in status.outgoing("step-5")] == ["end"]  # never runs into the data mode
    dev = package.workflow("dev-story")
    assert any(e.to == "step-5" and e.conditionText == "more tasks remain" for e in dev.graph.outgoing("step-8"))
    assert "**Go to anchor `task_check`** in this same step (no move)" in dev.step("step-1").body
    assert "**Go to step 6**: move to node `step-6`" in dev.step("step-1").body
    create = package.workflow("create-story")
    assert [n.id for n in create.graph.nodes][:3] == ["start", "step-1", "step-2"]
    assert "**Save section** (template-output): write the content for `story_header`" in create.step("step-5").body
    planning = package.workflow("sprint-planning")
    assert [n.id for n in planning.graph.nodes][:3] == ["start", "step-0.5", "step-1"]  # numerical order
    assert "Try Sharded Documents First" in planning.step("step-0.5").body  # the engine's protocol, inlined
    course = package.workflow("correct-course")  # `{date}` in a path stays for the run to fill in
    assert "sprint-change-proposal-{{date}}.md" in course.step("step-4").body


def test_a_step_file_workflow_runs_a_classic_one_as_a_sub_workflow(tmp_path: Path) -> None:
    src = classic_tree(tmp_path)
    _write(src, "notes/workflows/review/workflow.md", """
        ---
        name: review-notes
        ---
        # Review notes

        Load `./steps/step-01-review.md` and follow it.
    """)
    _write(src, "notes/workflows/review/steps/step-01-review.md", """
        # Review

        Read the notes. If one needs help, run `{project-root}/_bmad/notes/workflows/helper/workflow.yaml`.
    """)
    result = import_bmad(src)
    graph = json.loads(str(result.files["workflows/review-notes/workflow.graph.json"]))
    calls = [n for n in graph["nodes"] if n["type"] == "subworkflow"]
    assert [n["id"] for n in calls] == ["step-01-review.helper"]
    assert "subworkflowRef: helper" in str(result.files[calls[0]["file"]])
    assert not any("helper/workflow.yaml" in x.item for x in result.report.left_out)
    assert main(["validate", str(write_package(result, tmp_path / "pkg"))]) == 0


def test_absurd_nesting_is_imported_as_text_without_crashing(tmp_path: Path) -> None:
    deep = "<check if='x'>" * 3000 + "<action>GOTO step 1</action>" + "</check>" * 3000
    instructions = f'<workflow>\n<step n="1" goal="Deep">{deep}</step>\n</workflow>\n'
    result = import_bmad(classic_tree(tmp_path, instructions))
    step = str(result.files["workflows/new-note/steps/step-1.md"])
    assert "**If** x:" in step and "GOTO step 1" in step


def test_a_workflow_md_error_line_counts_its_frontmatter(tmp_path: Path) -> None:
    src = classic_tree(tmp_path)
    _write(src, "notes/workflows/tidy/workflow.md", """
        ---
        name: tidy
        description: Tidy the notes
        ---
        # Tidy

        <workflow>
        <step n="1" goal="Tidy">
        <action>Sort the notes</action>
        </stepp>
        </workflow>
    """)
    result = import_bmad(src)
    assert any("notes/workflows/tidy/workflow.md, line 10: malformed XML" in w for w in result.report.warnings)
    assert "workflows/tidy/workflow.graph.json" in result.files


@pytest.mark.parametrize("instructions", ["{project-root}/_bmad/../../secret.xml", "/etc/passwd", "../../../../secret.xml"])
def test_instructions_outside_the_tree_are_never_read(tmp_path: Path, instructions: str) -> None:
    (tmp_path / "secret.xml").write_text("<workflow><step n='1'>SECRET</step></workflow>", encoding="utf-8")
    result = import_bmad(classic_tree(tmp_path, yaml_text=f"name: new-note\ninstructions: \"{instructions}\"\n"))
    left = next(x for x in result.report.left_out if x.item == "notes/workflows/note/workflow.yaml")
    assert "is not in the BMAD tree" in left.reason
    assert not any("SECRET" in str(v) for v in result.files.values())


def test_instructions_named_beside_the_workflow_are_found(tmp_path: Path) -> None:
    src = classic_tree(tmp_path)
    yaml_file = src / "notes/workflows/note/workflow.yaml"
    yaml_file.write_text(yaml_file.read_text(encoding="utf-8").replace('"{installed_path}/instructions.xml"',
                                                                       '"instructions.xml"'), encoding="utf-8")
    result = import_bmad(src)
    assert "workflows/new-note/steps/step-3.md" in result.files


def test_a_call_to_a_workflow_that_cannot_be_imported_is_not_a_node(tmp_path: Path) -> None:
    src = classic_tree(tmp_path)
    (src / "notes/workflows/helper/instructions.md").write_text("<workflow></workflow>\n", encoding="utf-8")
    result = import_bmad(src)
    left = next(x for x in result.report.left_out if x.item == "notes/workflows/helper/workflow.yaml")
    assert "has no <step n=…>" in left.reason
    assert sum(1 for x in result.report.left_out if x.item == "notes/workflows/helper/workflow.yaml") == 1
    graph = json.loads(str(result.files["workflows/new-note/workflow.graph.json"]))
    assert not [n for n in graph["nodes"] if n["type"] == "subworkflow"]
    assert "is not available in this package" in str(result.files["workflows/new-note/steps/step-2.md"])
    assert main(["validate", str(write_package(result, tmp_path / "pkg"))]) == 0


def test_invoke_task_inlines_the_task_file(tmp_path: Path) -> None:
    src = classic_tree(tmp_path, INSTRUCTIONS.replace(
        "<template-output>note_body</template-output>",
        "<template-output>note_body</template-output>\n"
        "    <invoke-task>Check the note with {project-root}/_bmad/core/tasks/check-note.xml</invoke-task>\n"
        "    <invoke-task>Then run {project-root}/_bmad/core/tasks/missing.xml</invoke-task>"))
    _write(src, "core/tasks/check-note.xml", "<task id='check-note'><action>Count the words</action></task>\n")
    result = import_bmad(src)
    step3 = str(result.files["workflows/new-note/steps/step-3.md"])
    assert "**Run a task**: Check the note with" in step3 and "<action>Count the words</action>" in step3
    assert "The task file is not available here: do what this line says yourself." in step3
    assert any("core/tasks/missing.xml" in w for w in result.report.warnings)
