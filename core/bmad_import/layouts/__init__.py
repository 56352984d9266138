"""Readers for the BMAD v6 layouts after v6.0: skill folders, agents as skills, team customizations.

`skills` classifies skill folders and resolves their activation text, `customize` merges
`customize.toml` with team overrides, `skill_agents` turns agent skills into agents, `plans` plans
every workflow entry (step files, single skills, and classic ones through `..classic`), and
`generation` names the layout in the report.
"""
