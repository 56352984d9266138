"""Which BMAD v6 generation a tree is: each one keeps agents and workflows in a different layout."""

from __future__ import annotations

from ..source import BmadSource
from .skills import Skill

V60 = "BMAD v6.0 (`*.agent.yaml` agents, step-file `workflow.md` and classic `workflow.yaml` workflows)"
V61 = ("BMAD v6.1–v6.5 (`*.agent.yaml` agents with `skill:` menu items; workflows are skill folders with "
       "`SKILL.md` and `workflow.md`)")
V66 = ("BMAD v6.6+ (agents are skills: `bmad-agent-*/SKILL.md` + `customize.toml`; most workflows one `SKILL.md` "
       "with `references/`)")
LOOKED_FOR = ("`*.agent.yaml` agents (v6.0–v6.5), skill folders with a `SKILL.md` (v6.1+), or agent skills with a "
              "`customize.toml` `[agent]` table (v6.6+)")


def generation(source: BmadSource, skills: list[Skill]) -> str | None:
    """The generation in words, None when the tree holds no BMAD agents at all."""
    if any(s.kind == "agent" for s in skills):
        return V66
    if source.agent_files():
        return V61 if skills else V60
    return None
