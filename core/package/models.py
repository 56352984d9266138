"""Typed views of a loaded `.bmad` v1.1 package.

The JSON Schemas decide what is valid; these models are what the rest of the engine reads
after validation passed, so they stay permissive where the schemas are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..base.errors import CrewError
from .next_steps import NextStep, NextSteps

NodeType = Literal["step", "decision", "merge", "end", "subworkflow"]


class Edge(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    from_: str = Field(alias="from")
    to: str
    label: str
    id: str | None = None
    isDefault: bool = False
    conditionText: str | None = None
    conditionExpr: dict[str, Any] | None = None


class Node(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    type: NodeType
    file: str
    title: str | None = None
    description: str | None = None
    agentId: str | None = None
    inputs: list[str] = []
    outputs: list[str] = []

    @property
    def label(self) -> str:
        return self.title or self.id


class Graph(BaseModel):
    model_config = ConfigDict(extra="ignore")

    schemaVersion: str
    entryNodeId: str
    nodes: list[Node]
    edges: list[Edge] = []
    metadata: dict[str, Any] | None = None

    def node(self, node_id: str) -> Node | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    def outgoing(self, node_id: str) -> list[Edge]:
        return [e for e in self.edges if e.from_ == node_id]

    def has_edge(self, src: str, dst: str) -> bool:
        return any(e.from_ == src and e.to == dst for e in self.edges)

    def effective_node_id(self, current: str | None) -> str:
        """`""` (or blank) means "not started", which is the entry node."""
        return (current or "").strip() or self.entryNodeId


class StepFile(BaseModel):
    """A node's markdown script: frontmatter plus body, as shipped in the package."""

    path: str  # package-relative POSIX path
    frontmatter: dict[str, Any]
    body: str
    text: str  # the whole file, as the model would read it


class Persona(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    identity: str
    communication_style: str
    principles: str | list[str]

    def principle_lines(self) -> list[str]:
        if isinstance(self.principles, str):
            return [ln.strip(" -\t") for ln in self.principles.splitlines() if ln.strip(" -\t")]
        return list(self.principles)


class AgentMetadata(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str
    title: str
    icon: str
    module: str | None = None
    description: str | None = None


class AgentPrompt(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    content: str
    description: str | None = None


class MenuItem(BaseModel):
    """One agent menu entry; unknown BMAD keys (such as `cmd`) are kept."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")

    description: str
    trigger: str | None = None
    triggers: list[dict[str, Any]] | None = None
    cmd: str | None = None
    workflow: str | None = None
    exec: str | None = None
    action: str | None = None
    data: str | None = None
    validate_workflow: str | None = Field(default=None, alias="validate-workflow")
    ide_only: bool = Field(default=False, alias="ide-only")
    web_only: bool = Field(default=False, alias="web-only")


class FsPolicy(BaseModel):
    model_config = ConfigDict(extra="ignore")

    enabled: bool | None = None
    maxReadBytes: int | None = None
    maxWriteBytes: int | None = None


class McpPolicy(BaseModel):
    model_config = ConfigDict(extra="ignore")

    enabled: bool | None = None
    allowedServers: list[str] | None = None


class ShellPolicy(BaseModel):
    model_config = ConfigDict(extra="ignore")

    enabled: bool | None = None  # false: this agent never gets shell_run, whatever `commands:` says


class AgentTools(BaseModel):
    model_config = ConfigDict(extra="ignore")

    fs: FsPolicy | None = None
    mcp: McpPolicy | None = None
    shell: ShellPolicy | None = None


class Agent(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    metadata: AgentMetadata
    persona: Persona
    critical_actions: list[str] = []
    prompts: list[AgentPrompt] = []
    menu: list[MenuItem] = []
    systemPrompt: str | None = None
    tools: AgentTools | None = None

    @property
    def display_name(self) -> str:
        return f"{self.metadata.name} ({self.metadata.title})"

    def prompt(self, prompt_id: str) -> AgentPrompt | None:
        return next((p for p in self.prompts if p.id == prompt_id), None)


class Workflow(BaseModel):
    """One runnable workflow of a package, with everything needed to start and check a run."""

    id: str
    display_name: str
    description: str | None = None
    workflow_path: str  # package-relative path of the workflow.md template
    graph_path: str  # package-relative path of workflow.graph.json
    graph: Graph
    template: str  # workflow.md text (state template)
    steps: dict[str, StepFile]  # node id -> step file

    def step(self, node_id: str) -> StepFile | None:
        return self.steps.get(node_id)


class Package(BaseModel):
    """A validated package, ready to run. `root` is the (read-only) `@pkg` mount."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    id: str  # bmad.json name
    name: str
    version: str
    description: str | None = None
    root: Path
    manifest: dict[str, Any]
    agents: list[Agent]
    workflows: list[Workflow]  # default workflow first
    next_steps: NextSteps | None = None  # what may follow each workflow (next-steps.json), None without one

    def agent(self, agent_id: str) -> Agent | None:
        return next((a for a in self.agents if a.id == agent_id), None)

    def find_agent(self, name_or_id: str) -> Agent | None:
        """Match an agent by id or persona name, case-insensitively."""
        key = name_or_id.strip().lower()
        return next(
            (a for a in self.agents if key in (a.id.lower(), a.metadata.name.lower())), None
        )

    def workflow(self, workflow_id: str) -> Workflow | None:
        return next((w for w in self.workflows if w.id == workflow_id), None)

    def resolve_workflow(self, workflow_ref: str | None) -> Workflow:
        """A workflow id, or a workflow.md path; empty means the default: the one bmad.json `entry` names."""
        ref = (workflow_ref or "").strip()
        if not ref:
            return self.default_workflow
        found = self.workflow(ref) or self.workflow_by_path(ref)
        if found is not None:
            return found
        code = "WORKFLOW_REF_UNKNOWN" if self.manifest.get("workflows") else "WORKFLOW_REF_MISMATCH"
        ids = ", ".join(w.id for w in self.workflows)
        raise CrewError(code, f"Package '{self.id}' has no workflow '{ref}'. Available: {ids}.")

    def workflow_by_path(self, md_path: str) -> Workflow | None:
        """Resolve a `workflow.md` path (package-relative, optionally `@pkg/`-prefixed)."""
        norm = md_path.strip().removeprefix("@pkg/").removeprefix("{package-root}/").removeprefix("./")
        return next((w for w in self.workflows if w.workflow_path == norm), None)

    def next_after(self, workflow_id: str) -> list[NextStep]:
        """The workflows offered once a run of `workflow_id` completes (none without next-steps.json)."""
        return self.next_steps.after(workflow_id) if self.next_steps else []

    @property
    def default_workflow(self) -> Workflow:
        return self.workflows[0]
