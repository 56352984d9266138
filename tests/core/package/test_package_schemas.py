"""The project's schemas accept exactly what the public v1.1 reference schemas accept.

Checked on the example documents (plus small ones using every optional field), on every
single-point change of the richest one, and on seeded random multi-point mutations. The reference
copies live beside the repository (../shared), so this test is skipped where they are not present.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from crewagent.core.base.frontmatter import parse
from crewagent.core.schemas import NAMES, validator
from tests.support.shared_files import REFERENCE_SCHEMAS, needs
from tests.support.paths import EXAMPLES

REFERENCE = REFERENCE_SCHEMAS

pytestmark = needs(REFERENCE_SCHEMAS)

_VALUES: list[Any] = [
    "", "x", "1.1", "1.1.3", "1.2", "0.1.0", "1.0", "bad id!", "step-01", "a" * 64, "not-a-date",
    "2025-01-01T00:00:00Z", "2025-01-01", 0, 1, -1, 1.5, True, False, None, [], [""], ["x"], {}, {"k": "v"},
]
_DROP = object()
_KEYS = ["zz", "stepsDir", "terminal", "cmd", "id", "label", "description", "nodeId", "enabled"]


def _documents() -> dict[str, list[Any]]:
    docs: dict[str, list[Any]] = {name: [] for name in NAMES}
    for path in sorted(EXAMPLES.rglob("*")):
        if path.name == "bmad.json":
            docs["bmad"].append(json.loads(path.read_text(encoding="utf-8")))
        elif path.name == "agents.json":  # one agent per document: cheaper, and mutations stay focused
            for agent in json.loads(path.read_text(encoding="utf-8"))["agents"]:
                docs["agents"].append({"schemaVersion": "1.1", "agents": [agent]})
        elif path.name == "workflow.graph.json":
            docs["workflow-graph"].append(json.loads(path.read_text(encoding="utf-8")))
        elif path.name == "workflow.md":
            fm, _ = parse(path.read_text(encoding="utf-8"))
            docs["workflow-frontmatter"].append({k: v for k, v in fm.items() if v != ""} | {"currentNodeId": ""})
        elif path.suffix == ".md" and path.parent.name == "steps":
            docs["step-frontmatter"].append(parse(path.read_text(encoding="utf-8"))[0])
    docs["bmad"].append({
        "schemaVersion": "1.1.2", "name": "full", "version": "1.0.0-rc.1+b7", "description": "d", "author": "a",
        "createdAt": "2025-01-01T00:00:00Z",
        "entry": {"workflow": "w.md", "graph": "g.json", "agents": "a.json", "assetsDir": "assets/"},
        "workflows": [{"id": "w", "displayName": "W", "description": "d", "workflow": "w.md", "graph": "g.json",
                       "tags": ["t"]}],
        "runtime": {"minRuntimeVersion": "1.0", "requiresNetwork": False},
        "integrity": {"sha256": "ab" * 32},
    })
    docs["agents"].append({"schemaVersion": "1.1", "agents": [{
        "id": "full", "metadata": {"name": "N", "title": "T", "icon": "I", "module": "m", "description": "d",
                                   "sourceId": "s"},
        "persona": {"role": "r", "identity": "i", "communication_style": "c", "principles": "p"},
        "critical_actions": ["c"], "prompts": [{"id": "p", "content": "c", "description": "d"}],
        "menu": [{"description": "d", "trigger": "t", "triggers": [{"type": "alias"}], "workflow": "w", "exec": "e",
                  "action": "a", "data": "x", "validate-workflow": "v", "ide-only": True, "web-only": False}],
        "systemPrompt": "s", "userPromptTemplate": "u", "discussion": True, "webskip": False,
        "conversational_knowledge": [{"k": "v"}],
        "tools": {"fs": {"enabled": True, "maxReadBytes": 1, "maxWriteBytes": 2},
                  "mcp": {"enabled": False, "allowedServers": ["s"]}},
    }]})
    docs["workflow-graph"].append({
        "schemaVersion": "1.1", "entryNodeId": "a", "metadata": {"k": "v"},
        "nodes": [{"id": "a", "type": "decision", "file": "a.md", "title": "t", "description": "d", "agentId": "x",
                   "inputs": ["i"], "outputs": ["o"]}],
        "edges": [{"id": "e", "from": "a", "to": "a", "label": "l", "isDefault": True, "conditionText": "c",
                   "conditionExpr": {"==": [1, 1]}}],
    })
    docs["workflow-frontmatter"].append({
        "schemaVersion": "1.1", "workflowType": "w", "runId": "r", "project_name": "p", "user_name": "u",
        "date": "d", "updatedAt": "2025-01-01T00:00:00Z", "currentNodeId": "a", "stepsCompleted": ["a"],
        "variables": {"k": 1}, "artifacts": ["x"],
        "decisionLog": [{"from": "a", "to": "b", "label": "l", "reason": "r", "decidedAt": "2025-01-01T00:00:00Z"}],
    })
    return docs


def _key_names(doc: Any) -> set[str]:
    return {k for c in _containers(doc) if isinstance(c, dict) for k in c}


def _containers(doc: Any) -> list[Any]:
    found = [doc] if isinstance(doc, (dict, list)) else []
    children = doc.values() if isinstance(doc, dict) else doc if isinstance(doc, list) else []
    for child in children:
        found += _containers(child)
    return found


def _single_point_mutations(doc: Any) -> list[Any]:
    """Every way to change one place of `doc`: drop or replace each key/item, add each extra key."""
    out: list[Any] = []
    for index in range(len(_containers(doc))):
        keys = list(_containers(doc)[index]) if isinstance(_containers(doc)[index], dict) else None
        slots = keys if keys is not None else list(range(len(_containers(doc)[index])))
        for slot in slots:
            for value in [_DROP, *_VALUES]:
                copied = copy.deepcopy(doc)
                target = _containers(copied)[index]
                if value is _DROP:
                    del target[slot]
                else:
                    target[slot] = copy.deepcopy(value)
                out.append(copied)
        if keys is not None:
            for key in _KEYS:
                if key not in keys:
                    copied = copy.deepcopy(doc)
                    _containers(copied)[index][key] = "x"
                    out.append(copied)
    return out


def _mutate(doc: Any, rng: random.Random) -> Any:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        target = rng.choice(_containers(doc))
        if isinstance(target, dict):
            action = rng.random()
            if target and action < 0.35:
                del target[rng.choice(list(target))]
            elif target and action < 0.8:
                target[rng.choice(list(target))] = copy.deepcopy(rng.choice(_VALUES))
            else:
                target[rng.choice(_KEYS)] = copy.deepcopy(rng.choice(_VALUES))
        elif target:
            i = rng.randrange(len(target))
            if rng.random() < 0.3:
                del target[i]
            else:
                target[i] = copy.deepcopy(rng.choice(_VALUES))
    return doc


@pytest.mark.parametrize("name", NAMES)
def test_same_verdicts_as_the_reference_schema(name: str) -> None:
    reference = Draft202012Validator(
        json.loads((REFERENCE / f"{name}.schema.json").read_text(encoding="utf-8")),
        format_checker=Draft202012Validator.FORMAT_CHECKER,
    )
    ours = validator(name)
    bases = _documents()[name]
    assert bases, f"no example documents for {name}"
    rng = random.Random(f"schemas-{name}")
    verdicts = {True: 0, False: 0}
    for base in bases:
        assert ours.is_valid(base) and reference.is_valid(base)
    richest = max(bases, key=lambda d: (len(_key_names(d)), -len(_containers(d))))
    candidates = _single_point_mutations(richest) + [_mutate(rng.choice(bases), rng) for _ in range(600)]
    for doc in candidates:
        expected = reference.is_valid(doc)
        assert ours.is_valid(doc) == expected, json.dumps(doc)[:400]
        verdicts[expected] += 1
    assert verdicts[True] > 50 and verdicts[False] > 50  # both sides of the boundary were exercised
