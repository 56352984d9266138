"""The story cycle (create-story → dev-story → code-review) as an imported package, and the scripted
model that runs any of its workflows to the end, each writing one file into the project."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from crewagent.core.bmad_import import import_bmad, write_package
from tests.support.bmad_trees import CYCLE_STEPS, STORY_CYCLE_HELP, story_cycle_bmad
from tests.support.fakes.llm_server import Reply
from tests.support.scripts import Body, _post_completion_reply, calls, complete_node, current_node, is_post_completion
from tests.support.scripts import node_brief, write

CYCLE_FILES = {
    "create-story": "stories/1-1-login.md",
    "dev-story": "src/login.py",
    "code-review": "stories/1-1-login-review.md",
}
"""The file each workflow of the cycle writes in the project."""

_WORKFLOW = re.compile(r"workflows/(create-story|dev-story|code-review)/")


def story_cycle_package(root: Path, *, catalog: str | None = STORY_CYCLE_HELP) -> Path:
    """The story cycle's BMAD tree, imported into a package folder under `root`."""
    story_cycle_bmad(root / "tree", catalog=catalog)
    return write_package(import_bmad(root / "tree" / "_bmad"), root / "story-cycle")


def cycle_workflow(body: Body) -> str | None:
    found = _WORKFLOW.search(node_brief(body) or "")
    return found.group(1) if found else None


def story_cycle_responder() -> Callable[[Body], Reply]:
    """A model that walks each cycle workflow (intro node, its one step, end) without a question."""

    def respond(body: Body) -> Reply:
        if is_post_completion(body):
            return _post_completion_reply(body, "Done: the file is in the project.")
        node, workflow = current_node(body), cycle_workflow(body)
        if workflow is None or node is None:
            return Reply(content=f"(scripted model: no plan for node {node!r})")
        if node == "workflow":
            return calls(complete_node(node, to=CYCLE_STEPS[workflow]))
        if node == CYCLE_STEPS[workflow]:
            path = CYCLE_FILES[workflow]
            return calls(write(f"@project/{path}", f"# {workflow}\n\nWritten by the {workflow} step.\n"),
                         complete_node(node, to="end", artifacts=[path]))
        if node == "end":
            return calls(complete_node(node, to=None, variables={"workflowStatus": "complete"}))
        return Reply(content=f"(scripted model: no plan for node {node!r})")

    return respond
