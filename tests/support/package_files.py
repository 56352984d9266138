"""Builders for small valid packages and hand-made zips, shared by the test_package* modules."""

from __future__ import annotations

import json
import stat
import zipfile
from pathlib import Path
from typing import Any, Callable


def write_json(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False), encoding="utf-8")


def edit_json(path: Path, change: Callable[[Any], None]) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    change(doc)
    write_json(path, doc)


def step_text(node_id: str, node_type: str, *, title: str = "A step", extra: str = "") -> str:
    return (
        f'---\nschemaVersion: "1.1"\nnodeId: "{node_id}"\ntype: "{node_type}"\ntitle: "{title}"\n{extra}---\n'
        f"# {title}\n\n## Goal\n\nDo the {node_id} part.\n\n## Instructions\n\n1. Do it.\n"
    )


def template_text(workflow_type: str, entry: str, *, updated_at: str = '""', extra: str = "") -> str:
    return (
        f'---\nschemaVersion: "1.1"\nworkflowType: "{workflow_type}"\nrunId: ""\nupdatedAt: {updated_at}\n'
        f'currentNodeId: "{entry}"\nstepsCompleted: []\nvariables: {{}}\ndecisionLog: []\nartifacts: []\n{extra}---\n'
        f"# Mini Workflow\n\n## Goal\n\nShow a tiny branch.\n"
    )


AGENTS: dict[str, Any] = {
    "schemaVersion": "1.1",
    "agents": [
        {
            "id": "guide",
            "metadata": {"name": "Gil", "title": "Guide", "icon": "🧭"},
            "persona": {
                "role": "Guide",
                "identity": "Walks the user through the mini workflow.",
                "communication_style": "Short sentences.",
                "principles": "Be brief.\nAsk only when needed.",
            },
            "prompts": [{"id": "hello", "content": "Say hello."}],
            "menu": [
                {"trigger": "start", "description": "Start the mini workflow", "workflow": "workflow.md"},
                {"trigger": "by-id", "description": "Start it by id", "workflow": "mini", "cmd": "*by-id"},
                {"trigger": "notes", "description": "Read the notes", "exec": "@pkg/assets/notes.md"},
                {"trigger": "hi", "description": "Say hi", "action": "#hello", "ide-only": True},
            ],
        },
        {
            "id": "helper",
            "metadata": {"name": "Hal", "title": "Helper", "icon": "🛠"},
            "persona": {
                "role": "Helper",
                "identity": "Finishes runs.",
                "communication_style": "Bullets.",
                "principles": ["Be concise."],
            },
            "tools": {"fs": {"enabled": True, "maxReadBytes": 1000}, "mcp": {"enabled": False}},
        },
    ],
}

GRAPH: dict[str, Any] = {
    "schemaVersion": "1.1",
    "entryNodeId": "step-01",
    "nodes": [
        {"id": "step-01", "type": "step", "file": "steps/step-01.md", "title": "Intake", "agentId": "guide"},
        {"id": "decide-02", "type": "decision", "file": "steps/decide-02.md", "title": "Decide"},
        {"id": "step-03a", "type": "step", "file": "steps/step-03a.md", "title": "Path A"},
        {"id": "step-03b", "type": "step", "file": "steps/step-03b.md", "title": "Path B"},
        {"id": "end-99", "type": "end", "file": "steps/end-99.md", "title": "Finish", "agentId": "helper"},
    ],
    "edges": [
        {"from": "step-01", "to": "decide-02", "label": "next"},
        {"from": "decide-02", "to": "step-03a", "label": "a", "conditionText": "variables.pick == 'a'"},
        {"from": "decide-02", "to": "step-03b", "label": "b", "isDefault": True},
        {"from": "step-03a", "to": "end-99", "label": "next"},
        {"from": "step-03b", "to": "end-99", "label": "next"},
    ],
}


def write_workflow(root: Path, prefix: str, workflow_type: str) -> None:
    """A copy of GRAPH plus its step files and template under `root/prefix` (prefix "" = root)."""
    base = root / prefix if prefix else root
    graph = json.loads(json.dumps(GRAPH))
    for node in graph["nodes"]:
        node["file"] = f"{prefix}/{node['file']}" if prefix else node["file"]
        path = root / node["file"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(step_text(node["id"], node["type"], title=node["title"]), encoding="utf-8")
    write_json(base / "workflow.graph.json", graph)
    (base / "workflow.md").write_text(template_text(workflow_type, "step-01"), encoding="utf-8")


def make_package(root: Path, *, name: str = "mini") -> Path:
    """A valid single-workflow package: 2 agents, 5 nodes with a decision, an asset."""
    root.mkdir(parents=True, exist_ok=True)
    write_json(
        root / "bmad.json",
        {
            "schemaVersion": "1.1",
            "name": name,
            "version": "1.0.0",
            "description": "A tiny package for tests.",
            "createdAt": "2025-01-01T00:00:00Z",
            "entry": {"workflow": "workflow.md", "graph": "workflow.graph.json", "agents": "agents.json",
                      "assetsDir": "assets/"},
        },
    )
    agents = json.loads(json.dumps(AGENTS))
    agents["agents"][0]["menu"][1]["workflow"] = name
    write_json(root / "agents.json", agents)
    write_workflow(root, "", name)
    (root / "assets").mkdir(exist_ok=True)
    (root / "assets" / "notes.md").write_text("# Notes\n", encoding="utf-8")
    return root


def make_multi_package(root: Path) -> Path:
    """A valid multi-workflow package: workflows/alpha and workflows/beta, entry = alpha."""
    root.mkdir(parents=True, exist_ok=True)
    write_workflow(root, "workflows/alpha", "alpha")
    write_workflow(root, "workflows/beta", "beta")
    write_json(
        root / "bmad.json",
        {
            "schemaVersion": "1.1",
            "name": "multi",
            "version": "0.2.0",
            "entry": {"workflow": "workflows/alpha/workflow.md", "graph": "workflows/alpha/workflow.graph.json",
                      "agents": "agents.json"},
            "workflows": [
                {"id": "beta", "displayName": "Beta", "workflow": "workflows/beta/workflow.md",
                 "graph": "workflows/beta/workflow.graph.json"},
                {"id": "alpha", "displayName": "Alpha", "workflow": "workflows/alpha/workflow.md",
                 "graph": "workflows/alpha/workflow.graph.json", "tags": ["x"]},
            ],
        },
    )
    agents = json.loads(json.dumps(AGENTS))
    agents["agents"][0]["menu"] = [
        {"trigger": "alpha", "description": "Run alpha", "workflow": "alpha"},
        {"trigger": "beta", "description": "Run beta", "workflow": "{package-root}/workflows/beta/workflow.md"},
    ]
    write_json(root / "agents.json", agents)
    return root


def zip_entries(path: Path, entries: list[tuple[str, bytes] | tuple[str, bytes, int]]) -> Path:
    """A zip with exactly these entries; a third item sets the unix mode (e.g. S_IFLNK | 0o777)."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for entry in entries:
            name, data = entry[0], entry[1]
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3
            info.external_attr = (entry[2] if len(entry) == 3 else stat.S_IFREG | 0o644) << 16
            zf.writestr(info, data)
    return path


def package_entries(root: Path, prefix: str = "") -> list[tuple[str, bytes]]:
    return [
        (prefix + p.relative_to(root).as_posix(), p.read_bytes())
        for p in sorted(root.rglob("*"))
        if p.is_file()
    ]


def files_under(path: Path) -> list[str]:
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*"))
