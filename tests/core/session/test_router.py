"""CommandRouter: how a typed word resolves to a command, and how a menu item maps to one."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from crewagent.core.package.loader import load_package
from crewagent.core.package.models import Agent, Graph, Node, Workflow
from crewagent.core.session.router import ResolvedCommand, menu_entries, parse_global_command, resolve, visible_items
from tests.support.shared_files import BMAD_V6_SRC, require
from tests.support.paths import EXAMPLES


@dataclass(frozen=True)
class Wf:
    """A workflow as the router sees it: an id and the path of its workflow.md."""

    id: str
    workflow_path: str


WORKFLOW_IDS = [
    Wf("create-prd", "workflows/create-prd/workflow.md"),
    Wf("hello-linear", "workflows/hello-linear/workflow.md"),
    Wf("hello-branch", "workflows/hello-branch/workflow.md"),
]


def make_agent(menu: list[dict[str, Any]], prompts: list[dict[str, str]] | None = None) -> Agent:
    return Agent.model_validate(
        {
            "id": "pm",
            "metadata": {"name": "John", "title": "Product Manager", "icon": "📋"},
            "persona": {"role": "PM", "identity": "x", "communication_style": "y", "principles": ["z"]},
            "prompts": prompts or [],
            "menu": menu,
        }
    )


AGENT = make_agent(
    [
        {"trigger": "CP or fuzzy match on create-prd", "description": "[CP] Create Product Requirements Document", "workflow": "create-prd"},
        {"trigger": "*hello-linear", "description": "Run the hello-linear workflow", "workflow": "workflows/hello-linear/workflow.md"},
        {"cmd": "*branch", "description": "[HB] Run the branching example", "workflow": "hello-branch",
         "triggers": [{"type": "alias", "match": "fork"}]},
        {"trigger": "ide-thing", "description": "Only in the IDE", "action": "inline help", "ide-only": True},
        {"trigger": "web-thing", "description": "Only on the web", "action": "menu.show", "web-only": True},
        {"trigger": "review", "description": "Review an artifact", "action": "#review",
         "triggers": [{"type": "handler", "match": "audit the architecture", "exec": "scripts/audit.md"}]},
        {"trigger": "dismiss", "description": "Dismiss the agent", "action": "agent.dismiss"},
    ],
    prompts=[{"id": "review", "content": "Review it."}],
)

# (text, surface, expected kind, expected visible index, extra expected fields)
CASES: list[tuple[str, str, str, int | None, dict[str, Any]]] = [
    ("", "web", "ShowMenu", None, {}),
    ("   ", "ide", "ShowMenu", None, {}),
    # rule 1: numbers over visible items only
    ("1", "web", "StartWorkflow", 1, {"workflow_id": "create-prd", "confidence": "exact"}),
    ("2", "web", "StartWorkflow", 2, {"workflow_id": "hello-linear"}),
    ("4", "web", "ShowMenu", 4, {}),  # web: item 4 is "web-thing" (builtin menu.show)
    ("4", "ide", "RunAction", 4, {}),  # ide: item 4 is "ide-thing" (inline)
    ("0", "web", "ClarifyChoice", None, {}),
    ("99", "web", "ClarifyChoice", None, {}),
    # rule 2: exact triggers, cmd, aliases, v6 codes, description codes; '*' and case ignored
    ("CP", "web", "StartWorkflow", 1, {"workflow_id": "create-prd", "confidence": "exact"}),
    ("*cp", "web", "StartWorkflow", 1, {"confidence": "exact"}),
    ("create-prd", "web", "StartWorkflow", 1, {"confidence": "exact"}),
    ("*HELLO-LINEAR", "web", "StartWorkflow", 2, {"workflow_id": "hello-linear", "confidence": "exact"}),
    ("branch", "web", "StartWorkflow", 3, {"workflow_id": "hello-branch", "confidence": "exact"}),
    ("fork", "web", "StartWorkflow", 3, {"confidence": "exact"}),
    ("[HB]", "web", "StartWorkflow", 3, {"confidence": "exact"}),
    ("hb", "web", "StartWorkflow", 3, {"confidence": "exact"}),
    ("review", "web", "RunAction", 5, {"confidence": "exact"}),
    ("dismiss", "web", "DismissAgent", 6, {}),
    # rule 3: fuzzy phrases
    ("please create the prd", "web", "StartWorkflow", 1, {"confidence": "high"}),
    ("create product requirements", "web", "StartWorkflow", 1, {"confidence": "medium"}),
    ("audit the architecture now", "web", "ExecScript", 5, {"md_path": "scripts/audit.md", "confidence": "high"}),
    ("hello", "web", "StartWorkflow", 2, {"confidence": "high"}),
    ("branching example", "web", "StartWorkflow", 3, {"confidence": "medium"}),
    ("prd", "web", "StartWorkflow", 1, {}),
    # rule 4: everything else is chat
    ("what is the weather like?", "web", "Chat", None, {"confidence": "low"}),
    ("hi", "web", "Chat", None, {}),
]


@pytest.mark.parametrize(("text", "surface", "kind", "index", "extra"), CASES)
def test_resolution_table(text: str, surface: str, kind: str, index: int | None, extra: dict[str, Any]) -> None:
    cmd = resolve(AGENT, text, surface=surface, workflows=WORKFLOW_IDS)  # type: ignore[arg-type]
    assert cmd.kind == kind, cmd
    assert cmd.item_index == index
    for key, value in extra.items():
        assert getattr(cmd, key) == value, (key, cmd)


def test_gating_hides_ide_only_on_web_and_web_only_on_ide() -> None:
    web = [item.trigger for _, item in visible_items(AGENT, "web")]
    ide = [item.trigger for _, item in visible_items(AGENT, "ide")]
    assert "ide-thing" not in web and "web-thing" in web
    assert "web-thing" not in ide and "ide-thing" in ide
    entries = menu_entries(AGENT, "web")
    assert [e.index for e in entries] == list(range(1, 7))
    assert [e.trigger for e in entries][:3] == ["create-prd", "*hello-linear", "*branch"]
    # typing a hidden item's trigger does not reach it
    assert resolve(AGENT, "ide-thing", surface="web", workflows=WORKFLOW_IDS).kind == "Chat"
    on_web = resolve(AGENT, "4", surface="web", workflows=WORKFLOW_IDS)
    on_ide = resolve(AGENT, "4", surface="ide", workflows=WORKFLOW_IDS)
    assert on_web.kind == "ShowMenu" and on_web.item_label == "Only on the web"  # builtin menu.show
    assert on_ide.kind == "RunAction" and on_ide.action is not None
    assert on_ide.action.type == "inline" and on_ide.action.value == "inline help"


def test_out_of_range_number_lists_the_valid_range() -> None:
    cmd = resolve(AGENT, "0", surface="web", workflows=WORKFLOW_IDS)
    assert cmd.kind == "ClarifyChoice"
    assert "1 to 6" in cmd.reason
    assert [c.index for c in cmd.candidates] == [1, 2, 3, 4, 5, 6]


def test_fuzzy_tie_clarifies_with_visible_indices() -> None:
    tie = make_agent(
        [
            {"trigger": "hello-linear", "description": "Run the hello-linear workflow", "workflow": "hello-linear"},
            {"trigger": "hello-branch", "description": "Run the hello-branch workflow", "workflow": "hello-branch"},
        ]
    )
    cmd = resolve(tie, "*hello", surface="web", workflows=WORKFLOW_IDS)
    assert cmd.kind == "ClarifyChoice"
    assert [(c.index, c.label) for c in cmd.candidates] == [
        (1, "Run the hello-linear workflow"),
        (2, "Run the hello-branch workflow"),
    ]
    # the clarification is stateless: the next number is just rule 1
    assert resolve(tie, "2", surface="web", workflows=WORKFLOW_IDS).workflow_id == "hello-branch"


def test_trigger_hit_beats_description_hit() -> None:
    agent = make_agent(
        [
            {"trigger": "notes", "description": "Write a story summary", "action": "summarise"},
            {"trigger": "story", "description": "Create the next one", "workflow": "hello-linear"},
        ]
    )
    cmd = resolve(agent, "a story please", surface="web", workflows=WORKFLOW_IDS)
    assert (cmd.kind, cmd.item_index) == ("StartWorkflow", 2)


def test_handler_match_beats_parent_description() -> None:
    agent = make_agent(
        [
            {"trigger": "x1", "description": "Audit things", "action": "inline one"},
            {"trigger": "x2", "description": "Other", "action": "inline two",
             "triggers": [{"type": "handler", "match": "audit", "action": "inline handler"}]},
        ]
    )
    cmd = resolve(agent, "audit please", surface="web", workflows=WORKFLOW_IDS)
    assert cmd.item_index == 2 and cmd.action is not None and cmd.action.value == "inline handler"


def test_first_line_is_matched_and_the_rest_kept_as_details() -> None:
    cmd = resolve(AGENT, "*review\nplease look at the PRD", surface="web", workflows=WORKFLOW_IDS)
    assert cmd.kind == "RunAction" and cmd.details == "please look at the PRD"


@pytest.mark.parametrize(
    ("item", "kind", "fields"),
    [
        ({"workflow": "hello-linear"}, "StartWorkflow", {"workflow_id": "hello-linear"}),
        ({"workflow": "{package-root}/workflows/hello-branch/workflow.md"}, "StartWorkflow", {"workflow_id": "hello-branch"}),
        ({"workflow": "nope"}, "Refused", {"error_code": "UNKNOWN_WORKFLOW"}),
        ({"workflow": "workflows/nope/workflow.md"}, "Refused", {"error_code": "UNKNOWN_WORKFLOW"}),
        ({"workflow": "{project-root}/bmad/workflows/prd/workflow.yaml"}, "Refused",
         {"error_code": "NOT_SUPPORTED_CLASSIC_WORKFLOW"}),
        ({"exec": "workflows/hello-linear/workflow.md"}, "StartWorkflow", {"workflow_id": "hello-linear"}),
        ({"exec": "scripts/brainstorm.md"}, "ExecScript", {"md_path": "scripts/brainstorm.md"}),
        ({"exec": "bmad/core/tasks/workflow.xml"}, "Refused", {"error_code": "NOT_SUPPORTED_CLASSIC_WORKFLOW"}),
        ({"exec": "legacy/instructions.yaml"}, "Refused", {"error_code": "NOT_SUPPORTED_CLASSIC_WORKFLOW"}),
        ({"action": "#review"}, "RunAction", {}),
        ({"action": "#missing"}, "Refused", {"error_code": "UNKNOWN_PROMPT_ID"}),
        ({"action": "menu.show"}, "ShowMenu", {}),
        ({"action": "agent.dismiss"}, "DismissAgent", {}),
        ({"action": "run.resume"}, "ResumeRun", {}),
        ({"action": "Summarise the project in 3 bullets"}, "RunAction", {}),
        ({"workflow": "hello-linear", "exec": "scripts/x.md"}, "StartWorkflow", {"workflow_id": "hello-linear"}),
        ({}, "Refused", {"error_code": "UNKNOWN_WORKFLOW"}),
    ],
)
def test_item_to_command_mapping(item: dict[str, Any], kind: str, fields: dict[str, Any]) -> None:
    agent = make_agent([{"trigger": "go", "description": "Go", **item}], prompts=[{"id": "review", "content": "R"}])
    cmd = resolve(agent, "go", surface="web", workflows=WORKFLOW_IDS)
    assert cmd.kind == kind, cmd
    for key, value in fields.items():
        assert getattr(cmd, key) == value
    if kind == "Refused":
        assert cmd.message


def test_refusal_messages_name_no_server_path() -> None:
    agent = make_agent([{"trigger": "go", "description": "Go", "workflow": "/srv/pkgs/classic/workflow.yaml"}])
    cmd = resolve(agent, "go", surface="web", workflows=WORKFLOW_IDS)
    assert cmd.error_code == "NOT_SUPPORTED_CLASSIC_WORKFLOW"
    assert "/srv" not in (cmd.message or "")


def test_action_refs_and_data_refs() -> None:
    agent = make_agent(
        [
            {"trigger": "a", "description": "A", "action": "#review", "data": "{project-root}/docs/context.yaml"},
            {"trigger": "b", "description": "B", "action": "do it", "data": "assets/table.CSV"},
            {"trigger": "c", "description": "C", "workflow": "hello-linear", "data": "notes", "validate-workflow": "hello-linear"},
        ],
        prompts=[{"id": "review", "content": "R"}],
    )
    a = resolve(agent, "a", surface="web", workflows=WORKFLOW_IDS)
    assert a.action is not None and (a.action.type, a.action.value) == ("promptId", "review")
    assert a.data is not None and (a.data.path, a.data.parse_as) == ("{project-root}/docs/context.yaml", "yaml")
    b = resolve(agent, "b", surface="web", workflows=WORKFLOW_IDS)
    assert b.data is not None and b.data.parse_as == "csv"
    c = resolve(agent, "c", surface="web", workflows=WORKFLOW_IDS)
    assert c.data is not None and c.data.parse_as == "text" and c.validate_workflow == "hello-linear"


def test_md_paths_normalise_through_real_workflow_objects() -> None:
    graph = Graph(schemaVersion="1.1", entryNodeId="s1", nodes=[Node(id="s1", type="end", file="flows/a/s1.md")])
    wf = Workflow(id="alpha", display_name="Alpha", workflow_path="flows/a/main-workflow.md",
                  graph_path="flows/a/g.json", graph=graph, template="", steps={})
    agent = make_agent([{"trigger": "go", "description": "Go", "exec": "@pkg/flows/a/main-workflow.md"}])
    cmd = resolve(agent, "go", surface="web", workflows=[wf])
    assert (cmd.kind, cmd.workflow_id) == ("StartWorkflow", "alpha")
    single = make_agent([{"trigger": "go", "description": "Go", "workflow": "workflow.md"}])
    only = [Wf("create-story-micro", "workflow.md")]
    assert resolve(single, "go", surface="web", workflows=only).workflow_id == "create-story-micro"


def test_empty_menu_numbers_clarify_and_text_chats() -> None:
    agent = make_agent([])
    assert resolve(agent, "1", surface="web", workflows=[]).kind == "ClarifyChoice"
    assert resolve(agent, "create something", surface="web", workflows=[]).kind == "Chat"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("*menu", "menu"),
        ("/PAUSE", "pause"),
        ("  *stop now please", "stop"),
        ("*Resume", "resume"),
        ("/dismiss", "dismiss"),
        ("*status", "status"),
        ("/foo", None),
        ("menu", None),
        ("stop", None),
        ("", None),
        ("**menu", None),
        ("1-2-user-authentication", None),
    ],
)
def test_global_commands(text: str, expected: str | None) -> None:
    assert parse_global_command(text) == expected


def test_resolved_command_is_plain_data() -> None:
    cmd = resolve(AGENT, "99", surface="web", workflows=WORKFLOW_IDS)
    assert ResolvedCommand.model_validate_json(cmd.model_dump_json()) == cmd


# ---- a PM-like menu: three workflows in one folder, phrases with extra words ---------------------

PRD_DIR = "workflows/2-plan-workflows/create-prd"
PM_WORKFLOWS = [
    Wf("create-prd", f"{PRD_DIR}/workflow-create-prd.md"),
    Wf("validate-prd", f"{PRD_DIR}/workflow-validate-prd.md"),
    Wf("edit-prd", f"{PRD_DIR}/workflow-edit-prd.md"),
    Wf("create-epics-and-stories", "workflows/3-solutioning/create-epics-and-stories/workflow.md"),
    Wf("create-story", "workflows/4-implementation/create-story/workflow.md"),
]
PM = make_agent(
    [
        {"trigger": "CP or fuzzy match on create-prd", "exec": f"{{package-root}}/{PRD_DIR}/workflow-create-prd.md",
         "description": "[CP] Create PRD: Expert led facilitation to produce your Product Requirements Document"},
        {"trigger": "VP or fuzzy match on validate-prd", "exec": f"@pkg/{PRD_DIR}/workflow-validate-prd.md",
         "description": "[VP] Validate PRD: Validate a Product Requirements Document is comprehensive and lean"},
        {"trigger": "EP or fuzzy match on edit-prd", "exec": f"{PRD_DIR}/workflow-edit-prd.md",
         "description": "[EP] Edit PRD: Update an existing Product Requirements Document"},
        {"trigger": "CE or fuzzy match on epics-stories",
         "exec": "workflows/3-solutioning/create-epics-and-stories/workflow.md",
         "description": "[CE] Create Epics and Stories: Create the Epics and Stories Listing"},
        {"trigger": "CS or fuzzy match on create-story", "workflow": "create-story",
         "description": "[CS] Create Story: Prepare the next story for development"},
        {"trigger": "CC or fuzzy match on correct-course", "workflow": "workflows/correct-course/workflow.yaml",
         "description": "[CC] Course Correction: decide how to proceed after a major change"},
    ]
)

PM_CASES: list[tuple[str, str, str | None]] = [
    # (text, expected kind, expected workflow id)
    ("1", "StartWorkflow", "create-prd"),
    ("2", "StartWorkflow", "validate-prd"),
    ("3", "StartWorkflow", "edit-prd"),
    ("CP", "StartWorkflow", "create-prd"),
    ("[CP]", "StartWorkflow", "create-prd"),
    ("create-prd", "StartWorkflow", "create-prd"),
    ("*create-prd", "StartWorkflow", "create-prd"),
    ("VP", "StartWorkflow", "validate-prd"),
    ("[VP]", "StartWorkflow", "validate-prd"),
    ("EP", "StartWorkflow", "edit-prd"),
    ("*edit-prd", "StartWorkflow", "edit-prd"),
    ("CE", "StartWorkflow", "create-epics-and-stories"),
    # phrases with extra words: one item clearly wins
    ("make a prd", "StartWorkflow", "create-prd"),
    ("Make a PRD please", "StartWorkflow", "create-prd"),
    ("I need a PRD", "StartWorkflow", "create-prd"),
    ("write a new prd for the billing feature", "StartWorkflow", "create-prd"),
    ("validate the prd", "StartWorkflow", "validate-prd"),
    ("I want to validate the PRD", "StartWorkflow", "validate-prd"),
    ("edit the prd", "StartWorkflow", "edit-prd"),
    ("update an existing product requirements doc", "StartWorkflow", "edit-prd"),
    ("make the next story", "StartWorkflow", "create-story"),
    ("create the epics and stories", "StartWorkflow", "create-epics-and-stories"),
    # close calls ask
    ("prd", "ClarifyChoice", None),
    ("the PRD", "ClarifyChoice", None),
    # classic targets are refused with the reason
    ("CC", "Refused", None),
    # unrelated chat goes to the persona
    ("what do you think about our pricing?", "Chat", None),
    ("hello there", "Chat", None),
    ("I want to chat about the prd", "Chat", None),
]


@pytest.mark.parametrize(("text", "kind", "workflow_id"), PM_CASES)
def test_pm_menu_routes_each_phrase_to_exactly_its_workflow(text: str, kind: str, workflow_id: str | None) -> None:
    cmd = resolve(PM, text, surface="web", workflows=PM_WORKFLOWS)
    assert cmd.kind == kind, cmd
    assert cmd.workflow_id == workflow_id, cmd


def test_prd_close_call_lists_the_three_prd_items() -> None:
    cmd = resolve(PM, "prd", surface="web", workflows=PM_WORKFLOWS)
    assert [c.index for c in cmd.candidates] == [1, 2, 3]


@pytest.mark.parametrize(
    "ref",
    [
        f"{PRD_DIR}/workflow-check-prd.md",  # a sibling that is not a workflow of the package
        f"{PRD_DIR}/workflow.md",  # the folder's name is create-prd, but this file is no workflow
        "workflows/create-prd/other/workflow.md",
    ],
)
def test_a_path_naming_no_workflow_never_starts_a_sibling(ref: str) -> None:
    for key in ("exec", "workflow"):
        agent = make_agent([{"trigger": "go", "description": "Go", key: ref}])
        cmd = resolve(agent, "go", surface="web", workflows=[*PM_WORKFLOWS, Wf("create-prd-2", "x/workflow.md")])
        assert (cmd.kind, cmd.error_code, cmd.workflow_id) == ("Refused", "UNKNOWN_WORKFLOW", None), (key, cmd)
        assert "create-prd" in (cmd.message or "")  # the known workflows are listed


# ---- the real BMAD v6 PM agent ---------------------------------------------------------------------

PM_FIXTURE = BMAD_V6_SRC / "bmm" / "agents" / "pm.agent.yaml"


def _imported_pm() -> tuple[Agent, list[Wf]]:
    """The v6 PM agent as an importer leaves it: same triggers and codes, each `exec` pointing at
    the package copy of the workflow file it names (three of them share the create-prd folder)."""
    require(BMAD_V6_SRC)
    raw = yaml.safe_load(PM_FIXTURE.read_text(encoding="utf-8"))["agent"]
    workflows: list[Wf] = []
    menu = []
    for item in raw["menu"]:
        item = dict(item)
        ref = item.get("exec")
        if isinstance(ref, str):
            path = ref.replace("{project-root}/_bmad/bmm/", "")
            item["exec"] = f"@pkg/{path}"
            name = path.rsplit("/", 1)[-1].removesuffix(".md").removeprefix("workflow-")
            workflows.append(Wf(name if name != "workflow" else path.split("/")[-2], path))
        menu.append(item)
    agent = Agent.model_validate(
        {"id": "pm", "metadata": {k: raw["metadata"][k] for k in ("name", "title", "icon")},
         "persona": raw["persona"], "menu": menu}
    )
    return agent, workflows


@pytest.mark.parametrize(
    ("text", "workflow_id"),
    [
        ("1", "create-prd"),
        ("CP", "create-prd"),
        ("create-prd", "create-prd"),
        ("*create-prd", "create-prd"),
        ("[CP]", "create-prd"),
        ("VP", "validate-prd"),
        ("EP", "edit-prd"),
        ("validate the prd", "validate-prd"),
        ("make a prd", "create-prd"),
        ("I need a PRD", "create-prd"),
    ],
)
def test_real_bmad_pm_menu_routes_right(text: str, workflow_id: str) -> None:
    agent, workflows = _imported_pm()
    assert {w.id for w in workflows} >= {"create-prd", "validate-prd", "edit-prd"}
    cmd = resolve(agent, text, surface="web", workflows=workflows)
    assert (cmd.kind, cmd.workflow_id) == ("StartWorkflow", workflow_id), cmd


def test_real_bmad_pm_classic_item_is_refused_with_its_reason() -> None:
    agent, workflows = _imported_pm()
    cmd = resolve(agent, "CC", surface="web", workflows=workflows)
    assert cmd.kind == "Refused" and cmd.error_code == "NOT_SUPPORTED_CLASSIC_WORKFLOW"


def test_the_readme_phrase_starts_create_story_in_the_example_package() -> None:
    package = load_package(EXAMPLES / "create-story-micro")
    sm = package.agent("sm")
    assert sm is not None
    cmd = resolve(sm, "make the next story", surface="web", workflows=package.workflows)
    assert (cmd.kind, cmd.workflow_id) == ("StartWorkflow", "create-story-micro")


def test_an_unavailable_item_is_explained_once() -> None:
    """The reason is said once: an import's marker, or an older import's "(unavailable here: …)" suffix."""
    agent = make_agent([
        {"trigger": "CS or fuzzy match on create-story", "description": "[CS] Create Story",
         "exec": "skill:bmad-create-story", "unavailable": "a classic BMAD workflow not converted yet"},
        {"trigger": "DS or fuzzy match on dev-story", "description": "[DS] Dev Story (unavailable here: classic BMAD workflow)",
         "workflow": "{project-root}/_bmad/bmm/workflows/4-implementation/dev-story/workflow.yaml"},
    ])
    marked, legacy = menu_entries(agent, "web")
    assert (marked.label, marked.unavailable) == ("[CS] Create Story", "a classic BMAD workflow not converted yet")
    assert legacy.label == "[DS] Dev Story" and legacy.unavailable and "unavailable here" not in legacy.label
    refused = resolve(agent, "let's write the next story", surface="web", workflows=WORKFLOW_IDS)
    assert refused.kind == "Refused" and refused.message.count("not available here") == 1
    assert "a classic BMAD workflow not converted yet" in refused.message
