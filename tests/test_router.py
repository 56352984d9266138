"""CommandRouter: the resolution table of D§6.4 and the item → command mapping of D§6.5."""

from __future__ import annotations

from typing import Any

import pytest

from core.package.models import Agent, Graph, Node, Workflow
from core.router import ResolvedCommand, menu_entries, parse_global_command, resolve, visible_items

WORKFLOW_IDS = ["create-prd", "hello-linear", "hello-branch"]


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
    assert resolve(single, "go", surface="web", workflows=["create-story-micro"]).workflow_id == "create-story-micro"


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
