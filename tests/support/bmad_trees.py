"""Small BMAD trees the import tests write on the fly (never copies of the real BMAD files)."""

from __future__ import annotations

from pathlib import Path
from textwrap import dedent

from tests.support.shared_files import BMAD_V6_SRC, BMAD_V62_SRC, BMAD_V611_SRC, FIXTURES, needs

__all__ = ["BMAD_V6_SRC", "BMAD_V62_SRC", "BMAD_V611_SRC", "FIXTURES", "installed_bmad", "needs_bmad_v6"]

needs_bmad_v6 = needs(BMAD_V6_SRC)
"""The real BMAD-METHOD v6.0.0 source tree is read in place; tests that need it skip, saying why, without it."""


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dedent(text).lstrip("\n"), encoding="utf-8")


def installed_bmad(project: Path) -> Path:
    """A project holding an installed `_bmad/` folder: one module, one agent, one branching
    workflow with a continuation step, a template, a Party Mode call and a classic menu item."""
    root = project / "_bmad"
    _write(root, "core/config.yaml", """
        user_name: Ada
        communication_language: English
        output_folder: "{project-root}/out"
    """)
    _write(root, "_config/manifest.yaml", """
        installation:
          version: 6.0.0-beta.2
    """)
    _write(root, "plans/config.yaml", """
        code: plans
        planning_artifacts: "{project-root}/out/plans"
        project_name: TaskNest
    """)
    _write(root, "plans/agents/planner.agent.yaml", """
        agent:
          metadata:
            id: "_bmad/plans/agents/planner.md"
            name: Pat
            title: Planner
            icon: "🗺️"
            module: plans
            capabilities: "plans"
          persona:
            role: Planner
            identity: Plans small projects.
            communication_style: Short sentences.
            principles:
              - Plans fit on one page
          critical_actions:
            - "Read {project-root}/_bmad/plans/data/rules.md before planning"
          menu:
            - trigger: PL or fuzzy match on make-plan
              exec: "{project-root}/_bmad/plans/workflows/plan/workflow-plan.md"
              description: "[PL] Make Plan: a one-page plan"
            - trigger: OL or fuzzy match on old-plan
              workflow: "{project-root}/_bmad/plans/workflows/old/workflow.yaml"
              description: "[OL] Old Plan: the classic planner"
            - trigger: TL or fuzzy match on tell
              action: "Tell the user about {planning_artifacts}"
              description: "[TL] Tell: where plans go"
              ide-only: true
    """)
    _write(root, "plans/agents/legacy.md", "# A compiled agent\n")
    _write(root, "plans/data/rules.md", "# Rules\n\nKeep it short.\n")
    _write(root, "plans/workflows/old/workflow.yaml", "name: old\ninstructions: instructions.xml\n")
    _write(root, "plans/workflows/old/instructions.xml", "<workflow/>\n")
    _write(root, "plans/workflows/plan/workflow-plan.md", """
        ---
        name: make-plan
        description: Make a one-page plan
        main_config: '{project-root}/_bmad/plans/config.yaml'
        nextStep: './steps/step-01-start.md'
        ---

        # Make Plan

        Load config from {main_config}. Greet {user_name}. Then read fully and follow: `{nextStep}`.
    """)
    _write(root, "plans/workflows/plan/templates/plan-template.md", "# Plan for {{project_name}}\n")
    _write(root, "plans/workflows/plan/steps/step-01-start.md", """
        ---
        name: 'step-01-start'
        nextStepFile: './step-02-choose.md'
        continueStepFile: './step-01b-continue.md'
        outputFile: '{planning_artifacts}/plan.md'
        planTemplate: '../templates/plan-template.md'
        partyModeWorkflow: '{project-root}/_bmad/core/workflows/party-mode/workflow.md'
        advancedElicitationTask: '{project-root}/_bmad/core/workflows/advanced-elicitation/workflow.xml'
        ---

        # Step 1: Start

        If {outputFile} exists, load {continueStepFile}. Otherwise copy {planTemplate} to {outputFile}.

        [A] Advanced Elicitation [P] Party Mode [C] Continue
    """)
    _write(root, "plans/workflows/plan/steps/step-01b-continue.md", """
        # Step 1b: Continue

        Read the plan's stepsCompleted and load the next step file.
    """)
    _write(root, "plans/workflows/plan/steps/step-02-choose.md", """
        ---
        name: 'step-02-choose'
        ---

        # Step 2: Choose the depth

        1. Quick plan: load `./step-03a-quick.md`
        2. Deep plan: load `./step-03b-deep.md`
    """)
    for letter, branch in (("a", "quick"), ("b", "deep")):
        _write(root, f"plans/workflows/plan/steps/step-03{letter}-{branch}.md", f"""
            # Step 3: {branch} plan

            Write the {branch} plan in {{planning_artifacts}}/plan.md, then load `./step-04-finish.md`.
        """)
    _write(root, "plans/workflows/plan/steps/step-04-finish.md", """
        # Step 4: Finish

        Tell {user_name} where the plan is. Offer a review: `{project-root}/_bmad/plans/workflows/review/workflow.md`.
    """)
    _write(root, "plans/workflows/review/workflow.md", """
        ---
        name: review-plan
        ---

        # Review Plan

        Read fully and follow `./steps/step-01-review.md`.
    """)
    _write(root, "plans/workflows/review/steps/step-01-review.md", """
        # Review

        Review the plan. If it needs rework, run `{project-root}/_bmad/plans/workflows/plan/workflow-plan.md`.
    """)
    _write(root, "core/workflows/party-mode/workflow.md", """
        ---
        name: party-mode
        description: Everyone talks
        ---

        # Party Mode

        Load `{project-root}/_bmad/_config/agent-manifest.csv`, then `./steps/step-01-talk.md`.
    """)
    _write(root, "core/workflows/party-mode/steps/step-01-talk.md", "# Talk\n\nLet the agents talk, then exit.\n")
    _write(root, "core/workflows/advanced-elicitation/workflow.xml", "<task/>\n")
    return root


STORY_CYCLE_HELP = """\
module,phase,name,code,sequence,workflow-file,command,required,agent,options,description,output-location,outputs,
cycle,4-implementation,Create Story,CS,30,_bmad/cycle/workflows/create-story/workflow.md,,true,sm,,"Story cycle start: then DS then CR",,story,
cycle,4-implementation,Dev Story,DS,40,_bmad/cycle/workflows/dev-story/workflow.md,,true,dev,,"Build the story then CR then back to DS if fixes needed",,,
cycle,4-implementation,Code Review,CR,50,_bmad/cycle/workflows/code-review/workflow.md,,false,dev,,"If issues back to DS; if approved then next CS",,,
"""
"""A help catalog of the phase-and-sequence generation for the story cycle below."""

CYCLE_STEPS = {"create-story": "step-01-draft", "dev-story": "step-01-build", "code-review": "step-01-review"}
"""Each story-cycle workflow's one step file (its node id in the imported package)."""


def story_cycle_bmad(project: Path, *, catalog: str | None = STORY_CYCLE_HELP) -> Path:
    """An installed `_bmad/` with the story cycle: a Scrum Master who drafts stories, a developer who
    builds and reviews them, one step per workflow, and (unless `catalog` is None) module-help.csv."""
    root = project / "_bmad"
    _write(root, "core/config.yaml", "user_name: Ada\ncommunication_language: English\n")
    _write(root, "cycle/config.yaml", 'code: cycle\nstory_dir: "{project-root}/stories"\n')
    for agent, name, items in (("sm", "Bob", ("create-story",)), ("dev", "Amelia", ("dev-story", "code-review"))):
        menu = "".join(
            f'    - trigger: {wf}\n      exec: "{{project-root}}/_bmad/cycle/workflows/{wf}/workflow.md"\n'
            f'      description: "[{wf[:2].upper()}] {wf}"\n' for wf in items
        )
        text = (f"agent:\n  metadata:\n    id: \"_bmad/cycle/agents/{agent}.md\"\n    name: {name}\n"
                f"    title: {agent}\n    icon: \"🧩\"\n    module: cycle\n  persona:\n    role: {agent}\n"
                f"    identity: Works on stories.\n    communication_style: Short.\n    principles:\n      - Small steps\n"
                f"  menu:\n{menu}")
        (root / "cycle/agents").mkdir(parents=True, exist_ok=True)
        (root / f"cycle/agents/{agent}.agent.yaml").write_text(text, encoding="utf-8")
    for workflow, step in CYCLE_STEPS.items():
        _write(root, f"cycle/workflows/{workflow}/workflow.md", f"""
            ---
            name: {workflow}
            description: The {workflow} step of the story cycle
            ---

            # {workflow}

            Read fully and follow `./steps/{step}.md`.
        """)
        _write(root, f"cycle/workflows/{workflow}/steps/{step}.md", f"""
            # {workflow}

            Do the {workflow} work on the story in {{story_dir}}, then finish.
        """)
    if catalog is not None:
        _write(root, "cycle/module-help.csv", catalog)
    return root
